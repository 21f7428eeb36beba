# The host, the SDK and the official runners in one image (the same image runs the host or a runner).
#   docker build -t agentrunner .
#   docker compose up            # host + PostgreSQL + the official runners (compose.yaml)
# Nothing is downloaded at run time; uv (pinned) comes from PyPI like every Python dependency.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 UV_LINK_MODE=copy UV_COMPILE_BYTECODE=1 \
    UV_PROJECT_ENVIRONMENT=/opt/agentrunner
RUN python -m pip install --no-cache-dir "uv==0.13.9"

WORKDIR /src
# dependencies first (cached while only the sources change)
COPY pyproject.toml uv.lock ./
COPY sdk_python/pyproject.toml sdk_python/README.md sdk_python/
COPY host/pyproject.toml host/
COPY runners/pyproject.toml runners/
RUN mkdir -p sdk_python/src/agentrunner host/src/agentrunner_host runners/src/agentrunner_runners \
    && uv sync --frozen --no-dev --no-install-workspace
COPY sdk_python sdk_python
COPY host host
COPY runners runners
COPY examples examples
RUN uv sync --frozen --no-dev

ENV PATH=/opt/agentrunner/bin:$PATH
RUN useradd --system --uid 10001 agentrunner && mkdir -p /var/lib/agentrunner \
    && chown agentrunner /var/lib/agentrunner
USER agentrunner
WORKDIR /var/lib/agentrunner
EXPOSE 50051 8080
ENTRYPOINT ["agentrunner-host"]
CMD ["serve", "--config", "/src/examples/compose/host.yaml"]
