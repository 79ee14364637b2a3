"""The official MCP conformance suite lanes (see run.sh)."""
