"""RunPod: pods listed through the runpod package as inventory hosts, and their SSH host keys."""
