"""The aiohttp endpoint: the app, its handlers for POST/GET/DELETE /mcp, and the 2026 passthrough."""
