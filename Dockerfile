# Images for the ESG scheduler (`esg scheduler`), the invoker agents (`esg agent`) and the compose
# cluster's one-shot CouchDB initialisation (`deploy/couchdb/init.py`); `deploy/healthcheck.py` is the
# readiness check Docker Compose and Kubernetes run in these containers. Two targets:
#
#   docker build --target cpu -t esg-openwhisk:0.1.0 .       scheduler, CouchDB init, agents on CPU nodes
#   docker build --target gpu -t esg-openwhisk:0.1.0-gpu .   agents on GPU nodes: onnxruntime-gpu with the
#                                                            CUDA 12 runtime and cuDNN 9 from NVIDIA's wheels
#
# (the tags docker-compose.yml and deploy/kubernetes/ use). Every Python package is installed at the exact
# version of deploy/requirements/<target>.txt, without build isolation (no unpinned download at build time).
# The GPU image needs no CUDA base image: the libraries come in the wheels, the driver from the host through
# the NVIDIA container runtime (`--gpus` / compose `deploy.resources` / the `nvidia` RuntimeClass).
#
# Both run as the unprivileged user `esg` (uid 10001). Only an agent that changes MIG slices needs root:
# NVML's GPU- and compute-instance create/destroy calls need CAP_SYS_ADMIN or the mig/config capability,
# so the MIG agent deployments set user 0 and privileged; an agent on whole GPUs (MIG off) does not.
FROM python:3.11-slim AS base
# The process runner's worker sandbox (bubblewrap, libseccomp for its filter; docs/security.md) and Node.js
# for nodejs:N actions.
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap libseccomp2 nodejs \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/esg
RUN groupadd --system --gid 10001 esg \
    && useradd --system --uid 10001 --gid esg --home-dir /var/lib/esg --no-create-home esg \
    && mkdir -p /var/lib/esg && chown esg:esg /var/lib/esg
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
COPY deploy/healthcheck.py ./deploy/healthcheck.py
COPY deploy/couchdb ./deploy/couchdb
ENTRYPOINT ["esg"]

FROM base AS cpu
COPY deploy/requirements/cpu.txt /tmp/requirements.txt
RUN pip install --no-cache-dir --no-deps -r /tmp/requirements.txt \
    && pip install --no-cache-dir --no-deps --no-build-isolation . && pip check && rm /tmp/requirements.txt
USER esg

FROM base AS gpu
COPY deploy/requirements/gpu.txt /tmp/requirements.txt
RUN pip install --no-cache-dir --no-deps -r /tmp/requirements.txt \
    && pip install --no-cache-dir --no-deps --no-build-isolation . && pip check && rm /tmp/requirements.txt
USER esg
