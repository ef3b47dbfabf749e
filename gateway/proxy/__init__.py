"""Proxies to the application backend (Centrifugo v6 ``client.proxy``, ``channel.proxy``,
``proxies``, ``rpc.proxy``): HTTP and gRPC transports, the request bodies, the typed results.
``gateway.connection.authorization.ProxyAuthorizer`` applies them to connections, and
gateway/connection/proxy_streams.py holds one connection's subscribe-stream subscriptions (gRPC).
Imports the settings, the metrics and the pure protocol modules; nothing of a connection.
"""
