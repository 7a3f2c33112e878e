"""OpenWhisk's activation response: its status codes (``ActivationResponse``: a WhiskActivation's
``response.statusCode``), the limit on the size of its result, and an action's default limits.

Defined here once for every side that speaks them: OpenWhisk's wire shapes and its REST API's views,
action metadata errors, the scheduler's answers, the scheduler<->agent messages, the agent and the action
runtime's client. ``docs/openwhisk-wire.md`` §3 says which failure is which. Only constants: it
imports nothing, so any part may import it (an import contract keeps it so).
"""

STATUS_SUCCESS = 0
STATUS_APPLICATION_ERROR = 1
STATUS_DEVELOPER_ERROR = 2
#: A failure of the system itself: the only code an ack marks ``isSystemError``.
STATUS_WHISK_ERROR = 3

#: Every status code, in order.
STATUS_CODES = (STATUS_SUCCESS, STATUS_APPLICATION_ERROR, STATUS_DEVELOPER_ERROR, STATUS_WHISK_ERROR)

#: OpenWhisk's limit on an activation's payload (``whisk.activation.payload.max``, its
#: ``ActivationEntityLimit.MAX_ACTIVATION_ENTITY_LIMIT``: 1 MiB by default). The agent answers a result
#: above it with a developer error, as OpenWhisk's invoker does; OpenWhisk's Kafka messages are sized
#: from it (:data:`controller_plugin.wire.MAX_MESSAGE_BYTES`).
MAX_RESULT_BYTES = 1_048_576

#: An action's limits when its document gives none (OpenWhisk's defaults: ``TimeLimit`` 60 s,
#: ``MemoryLimit`` 256 MB, ``LogLimit`` 10 MB, ``IntraConcurrentLimit`` 1). The stand-in controller fills
#: them into the documents it stores; the scheduler reads them where a document lacks one.
DEFAULT_LIMITS = {"timeout": 60000, "memory": 256, "logs": 10, "concurrency": 1}
