"""The battery's tasks as data: each is a folder ``tasks/<task>/`` beside this module.

A folder holds ``task.json`` (kind, which files the prompt shows, the rubric),
``prompt.md`` and a ``workspace/`` of files, with the task's own unittest tests
where it has them.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TASKS_DIR = Path(__file__).resolve().parent / "tasks"
TASK_ORDER = ("explain", "bugfix", "feature", "refactor", "tools")
SYSTEM_PROMPT = "You are a careful senior Python engineer."


@dataclass
class Task:
    name: str
    spec: dict[str, Any]
    prompt: str
    workspace: Path

    @property
    def kind(self) -> str:
        return self.spec["kind"]

    def files(self) -> dict[str, str]:
        return {p.name: p.read_text() for p in sorted(self.workspace.iterdir()) if p.is_file()}

    def tests(self) -> list[str]:
        return [name for name in self.files() if name.startswith("test_")]

    def copy_workspace(self, into: Path) -> Path:
        """A copy of the workspace in ``into``, for the model's code to change and run."""
        work = into / self.name
        shutil.copytree(self.workspace, work, ignore=shutil.ignore_patterns("__pycache__"))
        return work


def load_tasks(names: tuple[str, ...] | list[str] = TASK_ORDER, root: Path = TASKS_DIR) -> list[Task]:
    tasks = []
    for name in names:
        folder = root / name
        if not (folder / "task.json").is_file():
            raise ValueError(f"unknown eval task {name!r}; the tasks are {', '.join(TASK_ORDER)}")
        spec = json.loads((folder / "task.json").read_text())
        tasks.append(Task(name, spec, (folder / "prompt.md").read_text().strip(), folder / "workspace"))
    return tasks


def task_messages(task: Task) -> list[dict[str, Any]]:
    """The chat for a one-answer task: the prompt, then each file it shows in a fenced block."""
    files = task.files()
    shown = "\n\n".join(f"`{name}`:\n```python\n{files[name].rstrip()}\n```" for name in task.spec.get("show", []))
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": f"{task.prompt}\n\n{shown}"}]
