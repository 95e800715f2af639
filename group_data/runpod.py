"""Settings for RunPod pods (hosts of inventories/runpod.py); they override group_data/all.py.

Each pod's volume path comes from the RunPod API (its volumeMountPath, as
podkit_volume in the pod's host data), so it is not set here. Put here what
every pod shares, e.g. the model:

    vllm_model = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
    vllm_max_model_len = 65536
"""

# Clients come in through the pod's public TCP port (TLS from the edge's own CA) or RunPod's
# HTTPS proxy (plain HTTP from the proxy to the edge), both to the edge on podkit_edge_port
# (8000, the port RunPod exposes); vLLM itself listens on 127.0.0.1 only.
# A first start on a pod compiles and profiles for minutes; later starts reuse the
# compile cache on the volume.
podkit_ready_timeout = 1800
