"""Planning before spending: the GPU table, the memory model, checkpoints (hub or local, FP8
siblings), model families (parsers, chat templates) and the plan for one host."""

from podkit.plan.gpus import Hardware, PlanError, gpu_by_name, supports_fp8
from podkit.plan.memory import GIB
from podkit.plan.serverplan import Plan, make_plan

__all__ = ["GIB", "Hardware", "Plan", "PlanError", "gpu_by_name", "make_plan", "supports_fp8"]
