"""The host configuration: the YAML model, its loading, and legacy LangBot pipeline configs."""
