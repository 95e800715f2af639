"""podkit's pyinfra operations and facts. Each module is one tool, like pyinfra's own."""
