# The Taskcast image: one image, every service (`taskcast gateway|status-api|relay|up`).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY taskcast ./taskcast
COPY gateway ./gateway
COPY status_api ./status_api
COPY relay ./relay
COPY schema ./schema
COPY deploy ./deploy
RUN pip install --no-cache-dir . && useradd --system taskcast
USER taskcast
ENTRYPOINT ["taskcast"]
