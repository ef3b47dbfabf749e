"""The gateway's HTTP listeners: ``server`` (the uvicorn server built from settings: head bound,
request deadline), ``inline`` (server API requests answered by the HTTP protocol itself) and
``origins`` (the Origin check of connection endpoints).
"""
