"""Operating the gateway: the command line, configuration reloads and event-loop tuning."""
