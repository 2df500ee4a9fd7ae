"""A foreign peer of the StackUp contract on RabbitMQ, written with aio-pika:
the client the contract's AI server uses (Debian's python3-aio-pika).

It reads one JSON plan line on stdin, then:
  1. declares its own exclusive queues and binds them ("bind": name,
     exchange, routingKey) and prints "ready";
  2. publishes the plan's messages ("publish") as a foreign client does:
     only the headers the plan gives, none of eventpipe's;
  3. serves a request queue as the AI server does ("serve": queue, count,
     rejectSessions): each request is processed with
     message.process(requeue=False); a request for a session listed in
     rejectSessions raises inside it (a reject without requeue: the broker
     dead-letters it), any other generate.questions request is answered with
     a callback.questions POOL published to stackup.ai-to-core;
  4. collects what reaches its own queues until "expect" (name -> count) is
     met or timeoutMs passes;
and prints one JSON line: {"collected": {name: [message...]}, "served": [...]}.
A message is reported with its body (decoded JSON, or text), its delivery's
exchange and routing key, its properties and its headers, each header as
{"type": ..., "value": ...} in Python's terms.
"""
import asyncio
import datetime
import json
import sys
import uuid

import aio_pika


def typed(v):
    if isinstance(v, bool):
        return {"type": "bool", "value": v}
    if isinstance(v, int):
        return {"type": "int", "value": v}
    if isinstance(v, float):
        return {"type": "float", "value": v}
    if isinstance(v, (bytes, bytearray)):
        return {"type": "bytes", "value": bytes(v).decode("utf-8", "replace")}
    if isinstance(v, str):
        return {"type": "str", "value": v}
    if isinstance(v, (list, tuple)):
        return {"type": "list", "value": [typed(x) for x in v]}
    if isinstance(v, dict):
        return {"type": "table", "value": {str(k): typed(x) for k, x in v.items()}}
    if isinstance(v, datetime.datetime):
        return {"type": "timestamp", "value": v.isoformat()}
    if v is None:
        return {"type": "void", "value": None}
    return {"type": type(v).__name__, "value": str(v)}


def report(message):
    try:
        body = json.loads(message.body)
    except ValueError:
        body = message.body.decode("utf-8", "replace")
    return {
        "body": body,
        "exchange": message.exchange,
        "routingKey": message.routing_key,
        "messageId": message.message_id,
        "correlationId": message.correlation_id,
        "contentType": message.content_type,
        "contentEncoding": message.content_encoding,
        "deliveryMode": int(message.delivery_mode) if message.delivery_mode is not None else None,
        "headers": {k: typed(v) for k, v in (message.headers or {}).items()},
    }


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def header_value(h):
    # The plan spells a typed header as {"int": 2} or {"str": "2"}.
    if isinstance(h, dict) and len(h) == 1:
        (kind, v), = h.items()
        return int(v) if kind == "int" else str(v)
    return h


async def main():
    plan = json.loads(sys.stdin.readline())
    connection = await aio_pika.connect_robust(plan["url"])
    result = {"collected": {}, "served": []}
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=10)
        done = asyncio.Event()
        expect = plan.get("expect", {})

        def check():
            if all(len(result["collected"].get(n, [])) >= c for n, c in expect.items()):
                done.set()

        for b in plan.get("bind", []):
            name = b["name"]
            result["collected"][name] = []
            queue = await channel.declare_queue("", exclusive=True, auto_delete=True)
            await queue.bind(b["exchange"], routing_key=b["routingKey"])

            async def on_message(message, name=name):
                async with message.process(requeue=False):
                    result["collected"][name].append(report(message))
                check()

            await queue.consume(on_message)
        print("ready", flush=True)

        for p in plan.get("publish", []):
            exchange = await channel.get_exchange(p["exchange"], ensure=False)
            headers = {k: header_value(v) for k, v in (p.get("headers") or {}).items()}
            await exchange.publish(
                aio_pika.Message(
                    body=p["body"].encode(),
                    message_id=p.get("messageId"),
                    content_type=p.get("contentType"),
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                    headers=headers or None,
                ),
                routing_key=p["routingKey"],
            )

        serve = plan.get("serve")
        if serve:
            callbacks = await channel.get_exchange("stackup.ai-to-core", ensure=False)
            queue = await channel.get_queue(serve["queue"], ensure=False)
            served = 0
            async with queue.iterator() as messages:
                async for message in messages:
                    try:
                        async with message.process(requeue=False):
                            env = json.loads(message.body)
                            sid = env["payload"]["sessionId"]
                            if sid in serve.get("rejectSessions", []):
                                result["served"].append({"rejected": env["messageId"]})
                                raise RuntimeError("the peer refuses session %d" % sid)
                            cb = {
                                "messageId": str(uuid.uuid4()),
                                "messageType": "callback.questions",
                                "version": "v1",
                                "traceId": env["traceId"],
                                "publishedAt": now(),
                                "publisher": "ai-server",
                                "payload": {"sessionId": sid, "kind": "POOL", "status": "OK", "questions": [
                                    {"category": "CS_FUNDAMENTAL", "question": "peer question for %d" % sid,
                                     "jobCategory": None, "targetEvidence": "", "expectedSignal": ""}]},
                                "context": env.get("context") or {},
                            }
                            await callbacks.publish(
                                aio_pika.Message(
                                    body=json.dumps(cb).encode(),
                                    message_id=cb["messageId"],
                                    correlation_id=env["messageId"],
                                    content_type="application/json",
                                    content_encoding="utf-8",
                                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                                ),
                                routing_key="callback.questions",
                            )
                            result["served"].append({"answered": env["messageId"], "report": report(message)})
                    except RuntimeError:
                        pass
                    served += 1
                    if served >= serve["count"]:
                        break

        check()
        try:
            await asyncio.wait_for(done.wait(), plan.get("timeoutMs", 30000) / 1000)
        except asyncio.TimeoutError:
            result["error"] = "timed out waiting for %s" % json.dumps(expect)
    print(json.dumps(result), flush=True)


asyncio.run(main())
