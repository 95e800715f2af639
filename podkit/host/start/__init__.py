"""One vLLM start, from the check before it to the record after it: whether the installed vLLM
takes the new launch, the memory profile it reuses, the wait for it to answer, what went wrong when
it does not, the files that served before put back, and what the start logged and took.

The modules, in the order a start goes through them:

    launchcheck  the installed vLLM reads the new launch before the restart; a refusal names the setting
    profile      the memory profile one start measured, reused by the next start on the same key
    readiness    waiting for the server to answer: what to ask the host, and how to read its answer
    diagnose     the tail of the server's log turned into one line: what went wrong and what to change
    rollback     a new start that fails readiness: the files that served before put back and started
    startup      what vLLM logged at its last start, beside what the plan predicted
    phases       every start measured: its phases, from the log and the times podkit keeps
"""
