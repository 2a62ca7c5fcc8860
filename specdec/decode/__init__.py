"""Layer 4: decoding. The speculative loop is ``loop.step`` (one step of a batch's rows) and
``loop.stream`` (a single request); ``step.verify_step`` is the one verify forward of every
path; ``request.Request`` the one request lifecycle; ``plain`` pipelined plain decoding.

Words, each with one meaning throughout (code, tests, docs):
- block: what one verify forward feeds a row: its last token (the root) + its proposal.
- proposal: the draft tokens a drafter offers (linear, or a tree with ``parents``).
- accepted: the proposal's tokens the target agreed with (a prefix, or a root path).
- recovered: the target's token at the first rejected position (vLLM's word).
- bonus: the target's token after a fully accepted proposal.
- emitted: accepted + one recovered or bonus token: what a step outputs.
- fed: block rows the forward computed (1 + proposal length).
- kept: block rows whose cache entries survive the rollback (root + accepted path).
- parked: a finished row whose batch slot stays until enough rows leave together.
"""
