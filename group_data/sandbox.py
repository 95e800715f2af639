"""Settings for the local sandbox pod: a CPU host serving a tiny model (see group_data/all.py)."""

# Loopback only: the sandbox is never reachable from outside this machine (vLLM always is).
podkit_public = False
vllm_max_model_len = 65536
# CPU build: skip torch.compile (a start in ~30 s, not minutes) and size the KV
# cache explicitly (vLLM's default share of memory fails on small machines).
vllm_extra_args = ["--enforce-eager", "--kv-cache-memory-bytes", "64M"]
vllm_extra_env = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_HOST_IP": "127.0.0.1",
    # one OpenMP thread: on two cores vLLM's own binding gives the engine two, and the second
    # spins between the tiny model's parallel regions on the core the API server, the edge and
    # the client need (decoding is as fast with one; docs/measured.md, "One OpenMP thread")
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
}
# A CPU start of the tiny model takes 20-40 s on an idle machine; on two busy cores (CI runs four
# test sessions side by side) a start of the two-node cluster has taken over 300 s. Installing
# vllm-cpu is a separate step.
podkit_ready_timeout = 900
