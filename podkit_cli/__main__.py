"""``python -m podkit_cli ...``: the ``podkit`` command run by the interpreter that has podkit (how
one podkit command runs another, e.g. ``podkit up --move`` verifying the new pod)."""

from podkit_cli import main

main()
