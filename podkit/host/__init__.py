"""What the deploy does against one host: read it in one command (probe), refuse what cannot
work before anything changes (preflight), render its files, install vLLM, fetch the checkpoint,
wait for readiness and diagnose a server that does not come up."""
