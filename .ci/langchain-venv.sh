#!/usr/bin/env bash
# langchain-mcp-adapters pins mcp<2, so its recipe runs from its own venv (.venv-langchain).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-langchain
.venv-langchain/bin/pip install --quiet --upgrade pip
.venv-langchain/bin/pip install --quiet "langchain-mcp-adapters==0.3.2"
