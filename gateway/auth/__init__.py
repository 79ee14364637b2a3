"""The gateway as an OAuth 2.1 protected resource: fetching authorization servers' keys and verifying access
tokens (the rules are ``adapters.authz``'s)."""
