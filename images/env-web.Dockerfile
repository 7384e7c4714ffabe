# syntax=docker/dockerfile:1.7
# Venus web environment image: Debian Chromium + chromedriver, Playwright for Python (driving the
# system Chromium; Playwright's own browser download is not used) and the project.
# Chromium (156 here) ignores --remote-debugging-address in headless mode and serves CDP on
# 127.0.0.1:9222 only; browser pods therefore run a socat sidecar from this same image that
# forwards 0.0.0.0:9223 -> 127.0.0.1:9222 (manifests/base/device-pool.yaml). Measured here:
# Playwright connect_over_cdp through the forwarder works when clients address the pod by IP;
# Chromium rejects a DNS name in the Host header, so the gateway must dial pod IPs.
# Build from the repository root (after base.Dockerfile, whose tag it starts from):
#   docker build -f images/env-web.Dockerfile --build-arg BASE_IMAGE=registry.example.com/venus/base:0.1.0 .
ARG BASE_IMAGE=venus/base:0.1.0
FROM ${BASE_IMAGE}
ARG PLAYWRIGHT_VERSION=1.65.2
# root (uid 0) only for apt-get; the final USER is 10001 again.
USER 0
RUN apt-get update \
 && apt-get install -y --no-install-recommends chromium chromium-driver fonts-noto-color-emoji socat \
 && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir "playwright==${PLAYWRIGHT_VERSION}"
ENV CHROME_BIN=/usr/bin/chromium \
    MINIWOB_CHROME_BINARY=/usr/bin/chromium \
    MINIWOB_CHROMEDRIVER=/usr/bin/chromedriver \
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
USER 10001:10001
EXPOSE 9223
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:9222/json/version', timeout=2)"]
# Chromium refuses its sandbox inside an unprivileged container without user namespaces;
# --no-sandbox is the documented headless-in-container setting (the pod itself is the sandbox).
ENTRYPOINT ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", \
            "--disable-quic", "--no-first-run", "--disable-background-networking", \
            "--disable-component-update", "--disable-sync", "--user-data-dir=/tmp/chromium", \
            "--remote-debugging-port=9222"]
CMD ["about:blank"]
