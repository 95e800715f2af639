"""Settings for bare-metal GPU boxes: every host of inventories/baremetal.py.

pyinfra makes the inventory file's name a group, so this file applies to the
hosts listed there (and to any inventory named baremetal.py); a host's own
data in the inventory wins. Every key and its default: group_data/all.py.
"""

# The volume root: on a bare-metal box a folder on its data disk, not a pod's
# /workspace. Usually missing or root's on a fresh box: the deploy makes it
# (sudo install -d, owned by the SSH user) and writes everything below it as
# that user, so the venv, caches, key, scripts and logs are never root's.
podkit_volume = "/srv/vllm"

# Every GPU in one server: the probe counts the GPUs (nvidia-smi) and the plan
# uses that count as the tensor-parallel size; it must divide the model's
# attention heads (2 or 4 GPUs divide most models; 3 divides few), else the
# preflight stops the host and lists the sizes that would work. Set a number to
# use fewer GPUs (e.g. 2 of 4, leaving the others free).
vllm_tensor_parallel_size = None

# What keeps vLLM and the edge running. "supervisord" (the default, from PyPI in
# the venv) needs neither root nor systemd. "systemd" installs podkit-vllm.service
# and podkit-edge.service (the same scripts, Restart=on-failure, started at boot):
# the better choice on a box that reboots, where systemd runs (the preflight
# checks) and the SSH user has sudo.
podkit_supervisor = "supervisord"

# Clients reach a box at its SSH address on podkit_edge_port, over HTTPS from the
# edge's own CA (podkit_tls = "auto"); the deploy pins that CA on the controller.
# With a DNS name for the box, podkit_domain gets a Let's Encrypt certificate.
