"""Local mock servers of the external services the official runners front (Dify, n8n, Langflow, Coze,
DashScope, Tbox), for the tests and the services demo. They speak each service's public wire format and
split their writes at awkward byte boundaries, because networks do. See `mock_services.py`."""
