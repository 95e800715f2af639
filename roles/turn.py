"""One host's turn in the deploy: what it reads before any remote command, and what both roles do
the same way (the volume and its folders, a secret, a rendered file, what changed).

The settings, the way clients come in, the controller's key and Hugging Face token are read here
first: a bad datum or key file is one line naming the host and the fix, before anything runs on it.
"""

from __future__ import annotations

from typing import Any

from pyinfra.api.exceptions import DeployError

from operations import volume
from podkit import project_path
from podkit.host.hoststate import HostState
from podkit.host.render import RenderedFile
from podkit.keys import ApiKeyError, ensure_key, file_content, key_digest, read_hf_token
from podkit.settings import Settings, SettingsError
from podkit.wayin import way_in


class Turn:
    """One host of the run, as its role converges it. ``pod`` (the probe's snapshot) and ``files``
    (the files rendered for it) are set by the role's first steps, before any step below runs."""

    pod: HostState
    files: dict[str, RenderedFile]

    def __init__(self, host: Any) -> None:
        self.host, self.name = host, host.name
        self.settings = self.settings_of(host)
        self.paths = self.settings.paths
        self.way = way_in(host.name, host.data.dict(), self.settings.edge_port)  # how clients come in: TLS or not
        try:  # the controller's key and HF token: a bad file or variable is one line
            self.api_key = ensure_key(project_path(self.settings.api_key_file))
            self.hf_token = read_hf_token(project_path(self.settings.hf_token_file))
        except ApiKeyError as bad:
            raise DeployError(f"{host.name}: {bad}") from None
        self.files = {}

    @staticmethod
    def settings_of(host: Any) -> Settings:
        """The host's settings from all of its data, so a misspelt podkit_/vllm_ key is refused, not
        ignored; a bad datum is one line naming it and the fix, before any remote command."""
        try:
            return Settings.from_mapping(host.data.dict())
        except SettingsError as bad:
            raise DeployError(f"{host.name}: {bad}") from None

    def volume(self, router: bool = False) -> None:
        """The volume root (made the SSH user's with sudo if it is missing or root's) and its folders."""
        settings, pod = self.settings, self.pod
        volume.root(
            name=f"Ensure {settings.volume} exists and {pod.user or 'the SSH user'} can write it",
            path=settings.volume,
            user=pod.user or "root",
            group=pod.group or "root",
            writable=pod.volume_writable,
        )
        volume.directories(
            name=f"Ensure podkit's folders exist on {settings.volume}, each with its mode and owner",
            paths=self.paths.directories(router=router),
            present=pod.dirs,
            modes=pod.modes,
            owner=pod.owner,
        )

    def secret(self, what: str, path: str, value: str) -> None:
        """A secret whose source is the controller's file (read above): the host gets a 0600 copy."""
        volume.secret(
            name=f"Ensure the host's {what} matches the controller's, mode 0600",
            path=path,
            what=what,
            content=file_content(value),
            current_sha256=self.pod.files.get(path),
            sha256=key_digest(value),
            current=self.pod.modes.get(path),
            owner=self.pod.owner,
        )

    def managed(self, name: str, role: str):
        """The rendered file of ``role`` on the host, with its mode and owner (``name``: the end state)."""
        rendered = self.files[role]
        return volume.file(
            name=name,
            path=rendered.path,
            content=rendered.content,
            mode=rendered.mode,
            current_sha256=self.pod.files.get(rendered.path),
            sha256=rendered.sha256,
            current=self.pod.modes.get(rendered.path),
            owner=self.pod.owner,
        )

    def changed(self, paths_read: list[str]) -> bool:
        """Whether any of these files differs from what is on the host (a restart is due)."""
        sums = {f.path: f.sha256 for f in self.files.values()} | {self.paths.api_key: key_digest(self.api_key)}
        return any(self.pod.files.get(path) != sums[path] for path in paths_read)
