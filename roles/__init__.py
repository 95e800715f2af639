"""The deploy's two roles, each its own path: ``server`` (every host but a router) and ``router``
(a router host), over ``turn`` (what one host's turn reads first, and what both roles do the same
way). ``deploy.py`` picks the role; each role's ``converge`` reads as its path, step by step."""
