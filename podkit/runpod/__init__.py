"""RunPod: its REST API v2 (podkit's own client), pods as inventory hosts and their SSH host keys, new pods
from the plan and the catalog, moves; the account balance through the ``runpod`` package (GraphQL, optional)."""
