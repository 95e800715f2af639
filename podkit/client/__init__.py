"""What a client of a converged endpoint does: find it (targets), read what runs on the host
(serverinfo, for verify, bench and eval; status and wakes, for ``podkit status``), prove it works
(verify), measure speed (bench) and behaviour (eval), all through one HTTP client (api) and with
the same exit codes (outcome)."""
