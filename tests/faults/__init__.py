"""The fault suite: the gateway as a real process in front of a byte-level faulty upstream (faulty_upstream.py),
driven by legacy clients that misbehave too; every request is accounted for (test_faults.py)."""
