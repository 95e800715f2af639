"""Test doubles, kept out of the product package: a local hub speaking the Hugging Face HTTP
protocol (hub), a replay of RunPod's API (runpod_api), stand-in pods in network namespaces
(netpods) and small model repos for the hub (hub_repos). Used by tests/ and benchmarks/."""
