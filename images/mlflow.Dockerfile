# syntax=docker/dockerfile:1.7
# MLflow tracking server image: MLflow with the Postgres driver and boto3 (MinIO artifacts).
# Not the project: the server only stores runs. Built because the stock MLflow image lacks
# psycopg2 and boto3. Build: docker build -f images/mlflow.Dockerfile images/
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}
ARG MLFLOW_VERSION=3.18.0
ARG PSYCOPG2_VERSION=2.9.13
ARG BOTO3_VERSION=1.44.5
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1 \
    MLFLOW_DISABLE_TELEMETRY=true HOME=/home/mlflow
RUN pip install "mlflow==${MLFLOW_VERSION}" "psycopg2-binary==${PSYCOPG2_VERSION}" "boto3==${BOTO3_VERSION}" \
 && useradd --uid 10001 --create-home --home-dir /home/mlflow --shell /usr/sbin/nologin mlflow
USER 10001:10001
WORKDIR /home/mlflow
EXPOSE 5000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:5000/health', timeout=4)"]
ENTRYPOINT ["mlflow", "server"]
CMD ["--host", "0.0.0.0", "--port", "5000"]
