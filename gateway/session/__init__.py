"""Legacy sessions in this process: the session store, runtimes, bridge exchanges, SSE streams and listens."""
