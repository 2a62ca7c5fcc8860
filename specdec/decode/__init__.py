"""Layer 4: decoding. ``step.verify_step`` is the one verify step of every path;
``request.Request`` the one request lifecycle; ``batch.Batch`` holds the rows (one for a
single stream); ``plain`` is pipelined plain decoding."""
