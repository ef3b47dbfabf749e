"""Proxies to the application backend (Centrifugo v6 ``client.proxy``, ``channel.proxy``,
``proxies``, ``rpc.proxy``): HTTP and gRPC transports, the request bodies, the typed results.
``gateway.authorization.ProxyAuthorizer`` applies them to connections; ``stream`` holds the
subscribe-stream subscriptions (gRPC) of one connection. Imports the settings, the metrics and
the pure protocol modules; never the client driver.
"""
