# Image for the ESG scheduler (`esg scheduler`) and the invoker agents (`esg agent`).
# GPU nodes run the agent with the NVIDIA container runtime (`--gpus all` / compose `deploy.resources`).
FROM python:3.11-slim
WORKDIR /opt/esg
COPY pyproject.toml README.md ./
COPY esg ./esg
COPY esg_cli ./esg_cli
COPY controller_plugin ./controller_plugin
COPY invoker_agent ./invoker_agent
COPY profiles ./profiles
COPY apps ./apps
COPY actions ./actions
RUN pip install --no-cache-dir '.[actions]'
ENTRYPOINT ["esg"]
