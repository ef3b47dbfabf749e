# The Taskcast image: one image, every service (`taskcast gateway|status-api|relay|up`), plus the
# task board the Status API serves under /board/ (client-js/board and the bundle built below).
# tests/test_image.py replays these steps without Docker and checks the tree they produce.

# Stage 1: the browser bundle (client-js/dist: taskcast.js, board.js), built from the lockfile.
FROM node:20-slim AS client
WORKDIR /src/client-js
COPY client-js/package.json client-js/package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY client-js/src ./src
COPY client-js/board ./board
COPY client-js/scripts ./scripts
# --no-pack: the image serves the bundles; the npm tarball is built from a checkout (docs/client-js.md).
RUN npm run build -- --no-pack

# Stage 2: the services. Installed editable so the code runs from /app and finds the files next to
# it (schema/, client-js/board, client-js/dist) exactly as in a source checkout.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY taskcast ./taskcast
COPY gateway ./gateway
COPY status_api ./status_api
COPY relay ./relay
COPY httpwire ./httpwire
COPY schema ./schema
COPY deploy ./deploy
COPY client-js/board ./client-js/board
COPY --from=client /src/client-js/dist ./client-js/dist
# /app/var: `taskcast up`'s default --data-dir, writable by the unprivileged user.
# The tracing extra: OpenTelemetry, imported only when a service's opentelemetry option is on.
RUN pip install --no-cache-dir -e '.[tracing]' && useradd --system taskcast && install -d -o taskcast /app/var
USER taskcast
ENTRYPOINT ["taskcast"]
