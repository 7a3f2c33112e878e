# Image for the ESG scheduler (`esg scheduler`), the invoker agents (`esg agent`) and the compose
# cluster's one-shot CouchDB initialisation (`deploy/couchdb/init.py`); `deploy/healthcheck.py` is the
# readiness check Docker Compose and Kubernetes run in these containers.
# GPU nodes run the agent with the NVIDIA container runtime (`--gpus all` / compose `deploy.resources`).
#
#   docker build -t esg-openwhisk:0.1.0 .      (the tag docker-compose.yml and deploy/kubernetes/ use)
FROM python:3.11-slim
# The process runner's worker sandbox (bubblewrap, libseccomp for its filter) and Node.js for nodejs:N actions.
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap libseccomp2 nodejs \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/esg
COPY pyproject.toml README.md ./
COPY esg ./esg
COPY esg_files ./esg_files
COPY esg_cli ./esg_cli
COPY controller_plugin ./controller_plugin
COPY invoker_agent ./invoker_agent
COPY agent_channel ./agent_channel
COPY openwhisk_status ./openwhisk_status
COPY esg_build ./esg_build
COPY profiles ./profiles
COPY apps ./apps
COPY actions ./actions
RUN pip install --no-cache-dir '.[actions]'
COPY deploy/healthcheck.py ./deploy/healthcheck.py
COPY deploy/couchdb ./deploy/couchdb
ENTRYPOINT ["esg"]
