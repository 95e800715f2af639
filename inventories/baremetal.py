"""Bare-metal GPU boxes: a static inventory you copy and edit (the addresses are examples).

    pyinfra -y inventories/baremetal.py deploy.py      # converge every box
    podkit verify inventories/baremetal.py      # and prove each one serves

Run from the project root: pyinfra reads group_data/ from the working directory.
Every host here is in the group "gpu_boxes" (the list below) and in the group
"baremetal" (this file's name), so group_data/baremetal.py applies to all of
them: the volume at /srv/vllm, every GPU in one server (TP from the host's own
GPU count and the plan), supervisord or systemd units. A host's own dict wins
over both, and podkit/settings.py declares every key (docs/settings.md).

The SSH user need not be root. A non-root user needs passwordless sudo for two
things only: creating the volume root (owned by that user) when it is missing
or root's, and with podkit_supervisor = "systemd" installing the units and
running systemctl. Everything else, the server included, runs as that user.
"""

gpu_boxes = [
    # A 2-GPU box: TP 2, the model's heads split over both cards.
    (
        "gpu-box-1",
        {
            "ssh_hostname": "192.0.2.10",  # documentation address (RFC 5737): put your box's here
            "ssh_port": 22,
            "ssh_user": "ubuntu",  # a sudoer; root works too (no sudo needed then)
            "ssh_key": "~/.ssh/id_ed25519",
            "vllm_served_model_name": "coder",  # the name this box's agents put in "model"
        },
    ),
    # A 4-GPU box behind a non-standard SSH port, with its volume on another
    # disk and the longest context the plan finds fits on its 4 GPUs (TP 4).
    (
        "gpu-box-2",
        {
            "ssh_hostname": "192.0.2.11",
            "ssh_port": 2222,
            "ssh_user": "ops",
            "ssh_key": "~/.ssh/gpu_boxes_ed25519",
            "podkit_volume": "/data/vllm",
            "vllm_max_model_len": "auto",
        },
    ),
]
