"""Planning before spending: the GPU table, the memory model, checkpoints (hub or local, FP8
siblings), model families (parsers, chat templates) and the plan for one host."""
