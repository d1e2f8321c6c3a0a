"""The example agent: lists invoices and asks to pay one.

It is written as a compromised agent would be run: it does not know it is
sandboxed, and it also tries the things the sandbox must stop. Run it with
`constle run agent.yaml` once `constle run` exists; until then the quickstart
only validates its Agentfile and shows a signed audit log.
"""

import os
import sys


def main() -> int:
    queue = os.environ.get("INVOICE_QUEUE", "inbox")
    mcp = os.environ.get("CONSTLE_MCP_ACCOUNTING_URL")
    print(f"invoice-processor: queue={queue} accounting={'set' if mcp else 'unset'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
