"""Transport adapters: they move frames between a socket and a ``gateway.connection.client.Client``; all
protocol logic lives in the client and below."""
