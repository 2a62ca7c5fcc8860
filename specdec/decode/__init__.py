"""Layer 4: decoding. The speculative loop is ``loop.step`` (one step of a batch's rows) and
``loop.stream`` (a single request); ``step.verify_step`` is the one verify forward of every
path; ``request.Request`` the one request lifecycle; ``plain`` pipelined plain decoding.

Words, one meaning each (code, tests, docs): block (root + proposal, one verify forward);
proposal (the drafter's draft tokens, linear or a tree); accepted (draft tokens the target
agreed with); recovered (the target's token at the first rejection); bonus (the target's
token after a fully accepted proposal); emitted (accepted + one recovered or bonus token);
fed (block rows computed); tail (tokens a drafter rides after the block, never kept:
WeDLM's masks); kept (block rows whose cache entries survive the rollback);
parked (a finished row whose batch slot stays until enough rows leave together).
Glossary in full: docs/verify-and-rollback.md#the-words.
"""
