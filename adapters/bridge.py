"""The MRTR bridge as a ``handle(event) -> actions`` machine (2026-07-28 basic/patterns §Multi Round-Trip Requests;
docs/design/errors.md#bridge-limits-have-a-code-of-their-own,
docs/design/bridge.md#a-missing-capability-is-refused-before-anything-is-sent,
docs/design/bridge.md#a-clients-error-answer-ends-the-bridge, docs/design/bridge.md#url-elicitation-and-waiting-rounds).

The machine owns no I/O. Its whole state is a :class:`~adapters.records.PendingRound` record (serializable, so
another process holding it can continue the round) plus an immutable :class:`BridgeContext`. The shell performs
the returned actions and feeds back events:

==========================  =====================================================================
action                      the shell ...
==========================  =====================================================================
``CallUpstream(extra)``     builds the request with ``upstream.build_request`` (fresh id, same method and
                            the client's original params, plus ``extra``) and feeds back the outcome
``SendToClient(message)``   writes a JSON-RPC request/notification on the original POST's SSE stream
``ArmTimer(name, s, rnd)``  feeds ``TimerFired(name, rnd)`` after ``s`` seconds (stale rounds are ignored)
``AbortUpstream()``         closes the in-flight upstream response (the 2026 cancel: basic/patterns §Cancellation)
``StoreRoots(result)``      caches the client's roots in the session record
``Finish(message)``         writes the final response (``None``: cancelled, nothing is sent, as in 2025-11-25)
``PollTask(id)``            sends ``tasks/get`` for the upstream task and feeds back the outcome as for ``CallUpstream``
``UpdateTask(id, answers)`` sends ``tasks/update`` with the client's answers, feeds back the outcome likewise
``CancelTask(id)``          sends ``tasks/cancel`` and feeds back nothing (the call is over)
``TaskEnded(outcome)``      counts the task's outcome (telemetry)
``RememberTask(task)``      keeps a 2025 task as last seen in the session's registry (adapters.legacy_tasks)
==========================  =====================================================================

A call that comes back as a task (``resultType: "task"``, io.modelcontextprotocol/tasks, when the shell declared the
extension: ``adapters.task_poll.declare``) stays open: the machine polls the task (``Timer.POLL``), turns status
messages into progress, an ``input_required`` task's ``inputRequests`` into requests to the client whose answers go
back with ``tasks/update``, and ends with the task's result or error; a task it gives up on (the client cancelled, a
limit, shutdown) is cancelled upstream
(docs/design/bridge.md#tasks-the-gateway-drives-them-or-maps-them-onto-2025-tasks). For a session with 2025-11-25
tasks (adapters.legacy_tasks) a task-augmented ``tools/call`` ends with its ``CreateTaskResult`` instead, and
``tasks/get``, ``tasks/cancel`` and the blocking ``tasks/result`` are driven here too; a 2025 task outlives its
requests, so ending one of them never cancels it."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import assert_never, cast

from adapters import errors as E
from adapters import legacy_tasks as LT
from adapters import takeover as T
from adapters import task_poll as TP
from adapters.errors import AuthChallenge, ErrorValue
from adapters.jsonwire import JsonObject, JsonValue, JsonView, members
from adapters.records import PendingRound, Phase
from adapters.results import Complete, InputRequired, Invalid, classify_result, response
from adapters.task_poll import TaskOutcome, TaskState, TaskView
from adapters.tool_policy import OPEN, ToolPolicy, filter_list


@dataclass(frozen=True, slots=True)
class BridgeLimits:
    """Every bridge limit (docs/design/errors.md#bridge-limits-have-a-code-of-their-own); each has a name the
    client sees when it is exceeded."""

    max_rounds: int = 10
    max_input_requests_per_round: int = 16
    client_answer_timeout_seconds: float = 300.0
    total_timeout_seconds: float = 900.0
    max_pending_per_session: int = 32
    # Bytes of the records of rounds waiting for their client (adapters.admission.admit_waiting), in the store.
    max_waiting_bytes_per_principal: int = 32 << 20
    max_waiting_bytes: int = 256 << 20
    state_only_backoff_seconds: float = 0.05
    state_only_backoff_max_seconds: float = 1.0
    # Tasks (adapters.task_poll): tasks one session drives at once, the poll interval's floor and backoff ceiling,
    # and how long a task may take (from its creation; after a takeover, from the request's arrival).
    max_tasks_per_session: int = 8
    task_poll_floor_seconds: float = 0.25
    task_poll_max_seconds: float = 5.0
    task_total_seconds: float = 3600.0


@dataclass(frozen=True, slots=True)
class BridgeContext:
    limits: BridgeLimits
    client_capabilities: JsonView  # as declared at initialize (2025 shape)
    new_id: Callable[[], str]  # injected: gateway request ids and elicitationIds (unique in the session)
    cached_roots: JsonView | None = None
    # The peer's tool policy, applied to a tools/list result; ``scoped``: tokens carry scopes ([gateway.auth]).
    tools: ToolPolicy = OPEN
    scoped: bool = False
    # Injected: how many other requests of the session are driving a task now (max_tasks_per_session).
    tasks_running: Callable[[], int] = lambda: 0
    # Whether the shell declared the tasks extension on this call (adapters.task_poll.declare): a task answer to
    # a call that did not is the upstream's error (ext-tasks: a task only for a request that declared it).
    tasks_declared: bool = True
    # The session has 2025 tasks (adapters.legacy_tasks.enabled): a task-augmented tools/call is answered with
    # its CreateTaskResult, and tasks/get, tasks/result and tasks/cancel are driven here.
    legacy_tasks: bool = False

    @property
    def cache_roots(self) -> bool:
        """Roots are cached only for clients that declared roots.listChanged: they tell us when it goes stale."""
        roots = self.client_capabilities.get("roots")
        return isinstance(roots, Mapping) and roots.get("listChanged") is True


def _answer_error(event: ClientAnswered) -> JsonView | None:
    """The error object a client's answer ends the bridge with, or None for a usable result. An answer that is
    neither a result object nor an error object (``"error": "no"``, a list, a number) is invalid like one with
    no result: INVALID_REQUEST, named as the client's (docs/design/bridge.md#a-clients-error-answer-ends-the-bridge),
    never passed on as it is."""
    if event.error is None and isinstance(event.result, Mapping):
        return None
    if isinstance(event.error, Mapping):
        return event.error
    if event.error is not None:
        return {"code": E.INVALID_REQUEST, "message": "the answer's error is not an error object"}
    return {"code": E.INVALID_REQUEST, "message": "the answer carried no result"}


# --- events ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class UpstreamResult:
    result: JsonValue


@dataclass(frozen=True, slots=True)
class UpstreamError:
    error: JsonView


@dataclass(frozen=True, slots=True)
class UpstreamFailed:
    """The round got no upstream answer: the hop failed, the request could not be built from the client's
    params, or the gateway failed; ``error`` is what the client receives."""

    error: ErrorValue


@dataclass(frozen=True, slots=True)
class ClientAnswered:
    gateway_id: str
    result: JsonValue = None
    error: JsonValue = None  # the client's "error" member, as sent: not necessarily an object


class Timer(StrEnum):
    CLIENT_ANSWER = "client_answer"  # the client's answers to one round are late
    TOTAL = "total"  # the whole bridged request is late
    BACKOFF = "backoff"  # a waiting round's delay is over: retry
    POLL = "poll"  # the upstream task is due for its next tasks/get
    TASK = "task"  # the upstream task took longer than task_total_seconds


@dataclass(frozen=True, slots=True)
class TimerFired:
    name: Timer
    round: int


@dataclass(frozen=True, slots=True)
class Cancelled:
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Aborted:
    """The gateway ends the request itself (it is shutting down): like a cancel upstream and towards the
    client's open requests, but the original request is answered with ``error`` so the client stops waiting."""

    error: ErrorValue


# --- actions --------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class CallUpstream:
    extra: JsonObject = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SendToClient:
    message: JsonObject


@dataclass(frozen=True, slots=True)
class ArmTimer:
    name: Timer
    seconds: float
    round: int


@dataclass(frozen=True, slots=True)
class AbortUpstream:
    pass


@dataclass(frozen=True, slots=True)
class StoreRoots:
    result: JsonObject


@dataclass(frozen=True, slots=True)
class PollTask:
    task_id: str

    def request(self) -> tuple[str, JsonObject]:
        return "tasks/get", {"taskId": self.task_id}


@dataclass(frozen=True, slots=True)
class UpdateTask:
    task_id: str
    responses: JsonObject

    def request(self) -> tuple[str, JsonObject]:
        return "tasks/update", {"taskId": self.task_id, "inputResponses": dict(self.responses)}


@dataclass(frozen=True, slots=True)
class CancelTask:
    task_id: str

    def request(self) -> tuple[str, JsonObject]:
        return "tasks/cancel", {"taskId": self.task_id}


@dataclass(frozen=True, slots=True)
class TaskEnded:
    outcome: TaskOutcome


@dataclass(frozen=True, slots=True)
class RememberTask:
    """Keep ``task`` (a 2025 Task) in the session's registry (adapters.legacy_tasks.remember); ``created``: the
    session just made it."""

    task: JsonObject
    created: bool = False


@dataclass(frozen=True, slots=True)
class Finish:
    message: JsonObject | None
    log: str | None = None
    challenge: AuthChallenge | None = None  # the upstream refused the client's token: answer with its status


Event = UpstreamResult | UpstreamError | UpstreamFailed | ClientAnswered | TimerFired | Cancelled | Aborted
Action = (CallUpstream | SendToClient | ArmTimer | AbortUpstream | StoreRoots | Finish | PollTask | UpdateTask
          | CancelTask | TaskEnded | RememberTask)
_TASK_CALLS = (Phase.TASK_POLL, Phase.TASK_UPDATE)


def admit(in_flight: Collection[JsonValue], ident: JsonValue, limits: BridgeLimits) -> ErrorValue | None:
    """Refuse a new forwarded request whose id is already in flight in the session (its answer could not be told
    from the other's: 2025-11-25 basic §Requests, ids unique in a session), or when the session already has
    too many in flight."""
    if ident in in_flight:
        return ErrorValue(E.INVALID_REQUEST, f"request id {ident!r} is already in flight in this session")
    if len(in_flight) >= limits.max_pending_per_session:
        return E.limit_error("max_pending_per_session", limits.max_pending_per_session)
    return None


def required_capability(entry: JsonView, caps: JsonView) -> tuple[str, JsonObject] | None:
    """The capability an input request needs and the client lacks (2026-07-28 basic/patterns §Multi Round-Trip
    Requests: never send undeclared ones)."""
    method, params = entry.get("method"), members(entry.get("params"))
    if method == "roots/list":
        return None if isinstance(caps.get("roots"), Mapping) else ("roots", {"roots": {}})
    if method == "sampling/createMessage":
        sampling = caps.get("sampling")
        if not isinstance(sampling, Mapping):
            return ("sampling", {"sampling": {}})
        if ("tools" in params or "toolChoice" in params) and not isinstance(sampling.get("tools"), Mapping):
            return ("sampling.tools", {"sampling": {"tools": {}}})
        return None
    elicitation = caps.get("elicitation")
    if not isinstance(elicitation, Mapping):
        return ("elicitation", {"elicitation": {}})
    mode = params.get("mode", "form")
    declared = set(elicitation) & {"form", "url"} or {"form"}  # {} means form only (2025-11-25 client/elicitation)
    if mode not in declared:
        return (f"elicitation.{mode}", {"elicitation": {str(mode): {}}})
    return None


_INPUT_RESULT_DROP_META = ("elicitation/create", "roots/list")  # no _meta in 2026-07-28 ElicitResult/ListRootsResult


class BridgeMachine:
    """One bridged request. ``record`` is the only state; save it after every ``start``/``handle``."""

    def __init__(self, record: PendingRound, ctx: BridgeContext) -> None:
        self.record = record
        self.ctx = ctx

    @property
    def done(self) -> bool:
        return self.record.phase is Phase.DONE

    def start(self) -> list[Action]:
        self.record.phase = Phase.UPSTREAM
        if self.record.method == "tasks/result":  # a 2025 task's result: its upstream task is polled until it ends
            self.record.task_id = str(self.record.params["taskId"])
            return [ArmTimer(Timer.TASK, self.ctx.limits.task_total_seconds, 0), *self._poll()]
        return [ArmTimer(Timer.TOTAL, self.ctx.limits.total_timeout_seconds, 0), CallUpstream({})]

    def resume(self, elapsed_seconds: float, unsent: Collection[str] = ()) -> list[Action]:
        """Continue the stored round in a replica that took it over
        (docs/design/takeover.md#leases-and-takeover-of-a-dead-replicas-rounds): its timers again (the total limit
        counts from the request's arrival, ``elapsed_seconds`` ago; the client gets a full answer wait), and a round
        that was in flight upstream or backing off is sent again with the stored ``inputResponses`` and
        ``requestState`` (adapters.takeover.repeats says what that may repeat). ``unsent``: gateway ids of
        outstanding requests the client never received (they are not in the stream's stored copy): asked again, the
        same message under the same id."""
        rec, limits = self.record, self.ctx.limits
        if self.done:
            return []
        task = rec.task_id is not None  # a task's own limit bounds it (counted here from the request's arrival)
        name, limit = ("task_total_seconds", limits.task_total_seconds) if task else (
            "total_timeout_seconds", limits.total_timeout_seconds)
        left = limit - elapsed_seconds
        if left <= 0:
            return self._settle_task(self._finish_error(E.limit_error(name, limit)), cancelled=False)
        total = ArmTimer(Timer.TASK if task else Timer.TOTAL, left, 0)
        if rec.phase is Phase.AWAITING_CLIENT:
            asks: list[Action] = [SendToClient(self._ask_message(gid)) for gid in rec.outstanding if gid in unsent]
            return [*asks, total, ArmTimer(Timer.CLIENT_ANSWER, limits.client_answer_timeout_seconds, rec.round)]
        if task:  # the task is durable upstream: poll it again (or resend answers whose update was in flight)
            return [total, *self._poll()]
        resent = T.resent(rec)
        actions: list[Action] = [total, *self._retry()]
        rec.resent = resent  # an error answering it no longer says the round failed (T.outcome_unknown)
        return actions

    def _ask_message(self, gateway_id: str) -> JsonObject:
        """The request the client was sent under ``gateway_id`` (as :meth:`_ask` built it)."""
        rec = self.record
        key = rec.outstanding[gateway_id]
        entry = rec.input_requests[key]
        params = dict(members(entry.get("params")))
        if key in rec.minted_ids:
            params["elicitationId"] = rec.minted_ids[key]
        if rec.method == "tasks/result" and rec.task_id is not None:
            params = LT.ask_params(params, rec.task_id)
        return {"jsonrpc": "2.0", "id": gateway_id, "method": entry["method"], "params": params}

    def handle(self, event: Event) -> list[Action]:
        if self.done:
            return []  # late answers and stale timers after the end are ignored (2026-07-28 §Cancellation)
        return self._settle_task(self._dispatch(event), cancelled=isinstance(event, Cancelled))

    def _dispatch(self, event: Event) -> list[Action]:
        phase = self.record.phase
        upstream = phase is Phase.UPSTREAM
        match event:
            case UpstreamResult(result) if phase is Phase.TASK_POLL:
                return self._on_task(result)
            case UpstreamResult() if phase is Phase.TASK_UPDATE:
                self.record.answers = {}  # stored upstream: the task goes on, and is polled at once
                return self._poll()
            case UpstreamError(error) if phase in _TASK_CALLS:
                return self._finish_error(E.translate_upstream_error(error))
            case UpstreamFailed(error) if phase in _TASK_CALLS:
                return self._task_call_failed(error)
            case UpstreamResult(result) if upstream:
                return self._on_result(result)
            case UpstreamError(error) if upstream:
                failed = E.translate_upstream_error(error)
                return self._finish_error(T.outcome_unknown(failed) if self.record.resent else failed)
            case UpstreamFailed(error) if upstream:
                return self._finish_error(error)
            case UpstreamResult() | UpstreamError() | UpstreamFailed():
                return []  # an answer to a round that is no longer in flight
            case ClientAnswered():
                return self._on_answer(event)
            case TimerFired():
                return self._on_timer(event)
            case Cancelled():
                return [*self._cancel_outstanding(), AbortUpstream(), self._end(None)]
            case Aborted(error):
                return [*self._cancel_outstanding(), AbortUpstream(), *self._finish_error(error)]
            case _:
                assert_never(event)

    # --- transitions ------------------------------------------------------------------------------------
    def _on_result(self, result: JsonValue) -> list[Action]:
        rec = self.record
        rec.resent = None  # the resent round was answered: what follows is an ordinary round
        if rec.method == "tasks/get":
            return self._legacy_task(result)
        if rec.method == "tasks/cancel":  # acknowledged upstream ({}): the 2025 answer is the task as it now is
            rec.task_id = str(rec.params["taskId"])
            return self._poll()
        if rec.method == "tools/call" and TP.is_task(result):
            if not self.ctx.tasks_declared:
                return self._finish_error(E.upstream_failure(
                    E.UpstreamFault.INVALID_RESULT,
                    "resultType 'task' for a call that did not declare the tasks extension"))
            if self.ctx.legacy_tasks and LT.augmented(rec.method, rec.params):
                return self._legacy_created(result)
            return self._on_task_created(result)
        outcome = classify_result(self.record.method, result)
        if isinstance(outcome, Invalid):
            return self._finish_error(outcome.error)
        if isinstance(outcome, Complete):
            done: list[Action] = [SendToClient(_elicitation_complete(eid)) for eid in self.record.url_elicitations]
            result = outcome.result
            if self.record.method == "tools/list":  # tools the peer may not use are not listed (tool_policy)
                result = filter_list(self.ctx.tools, result, self.ctx.scoped)
            return [*done, self._end(response(self.record.downstream_id, result))]
        return self._next_round(outcome)

    def _next_round(self, outcome: InputRequired) -> list[Action]:
        rec, limits = self.record, self.ctx.limits
        rec.round += 1  # every round, waiting ones too: it tells a stale timer from a live one
        waiting = self._is_waiting(outcome)
        if not waiting:
            # Only rounds that ask for input count against max_rounds. A waiting round
            # (docs/design/bridge.md#url-elicitation-and-waiting-rounds, after a URL accept the server may answer
            # requestState only until the out-of-band step is done) ends when the user finishes, however long that
            # takes; the total timeout bounds it.
            rec.input_rounds += 1
            if rec.input_rounds > limits.max_rounds:
                return self._finish_error(E.limit_error("max_rounds", limits.max_rounds))
        if len(outcome.input_requests) > limits.max_input_requests_per_round:
            return self._finish_error(E.limit_error("max_input_requests_per_round",
                                                    limits.max_input_requests_per_round))
        for entry in outcome.input_requests.values():
            missing = required_capability(entry, self.ctx.client_capabilities)
            if missing is not None:
                return self._finish_error(E.missing_capability_error(missing[0], missing[1], str(entry["method"])))
        rec.request_state, rec.input_requests = outcome.request_state, outcome.input_requests
        rec.answers, rec.outstanding, rec.minted_ids = {}, {}, {}
        sends = [a for key, entry in outcome.input_requests.items() for a in self._ask(key, entry)]
        if rec.outstanding:
            rec.phase = Phase.AWAITING_CLIENT
            return [*sends, ArmTimer(Timer.CLIENT_ANSWER, limits.client_answer_timeout_seconds, rec.round)]
        return self._send_answers(not waiting)

    def _is_waiting(self, outcome: InputRequired) -> bool:
        """Nothing new to ask: requestState only, or only URLs the client already accepted in this bridge
        (answered by the gateway, docs/design/bridge.md#url-elicitation-and-waiting-rounds)."""
        accepted = self.record.url_elicitations.values()
        return all(entry["method"] == "elicitation/create" and members(entry.get("params")).get("mode") == "url"
                   and members(entry.get("params")).get("url") in accepted
                   for entry in outcome.input_requests.values())

    def _ask(self, key: str, entry: JsonView) -> list[Action]:
        """Answer from what we already know (cached roots, an already accepted URL), or ask the client."""
        rec, params = self.record, dict(members(entry.get("params")))
        if entry["method"] == "roots/list" and self.ctx.cache_roots and self.ctx.cached_roots is not None:
            rec.answers[key] = dict(self.ctx.cached_roots)
            return []
        if entry["method"] == "elicitation/create" and params.get("mode") == "url":
            # docs/design/bridge.md#url-elicitation-and-waiting-rounds: never re-prompt the user with a URL they already
            # accepted in this bridge; answer "accept" again and back off, so the out-of-band step gets time to finish.
            if params.get("url") in rec.url_elicitations.values():
                rec.answers[key] = {"action": "accept"}
                return []
            params["elicitationId"] = rec.minted_ids[key] = self.ctx.new_id()  # 2025 requires it
        gateway_id = self.ctx.new_id()
        rec.outstanding[gateway_id] = key
        return [SendToClient(self._ask_message(gateway_id))]

    def _backoff_or_retry(self, immediate: bool) -> list[Action]:
        """A waiting round retries after a backoff that doubles up to a cap
        (docs/design/bridge.md#url-elicitation-and-waiting-rounds); the cap keeps a finished out-of-band step noticed
        within about a second, the total timeout ends a wait that never does."""
        rec, limits = self.record, self.ctx.limits
        if immediate:
            rec.state_only_rounds = 0
            return self._retry()
        # The exponent is clamped: waiting rounds are no longer bounded by max_rounds, and 2**n past ~1024 no
        # longer converts to a float.
        delay = min(limits.state_only_backoff_seconds * (2 ** min(rec.state_only_rounds, 32)),
                    limits.state_only_backoff_max_seconds)
        rec.state_only_rounds += 1
        rec.phase = Phase.BACKOFF
        return [ArmTimer(Timer.BACKOFF, delay, rec.round)]

    def _retry(self) -> list[Action]:
        rec = self.record
        rec.resent = None
        extra: JsonObject = {}
        if rec.answers:
            extra["inputResponses"] = dict(rec.answers)
        if rec.request_state is not None:
            # The same str object: byte for byte (2026-07-28 basic/patterns §Multi Round-Trip Requests).
            extra["requestState"] = rec.request_state
        rec.phase = Phase.UPSTREAM
        return [CallUpstream(extra)]

    def _on_answer(self, event: ClientAnswered) -> list[Action]:
        rec = self.record
        key = rec.outstanding.pop(event.gateway_id, None)
        if key is None or rec.phase is not Phase.AWAITING_CLIENT:
            return []
        entry = rec.input_requests[key]
        error = _answer_error(event)
        if error is not None:
            return [*self._cancel_outstanding(), self._end(response(
                rec.downstream_id, error=E.client_refused_error(key, str(entry["method"]), error)))]
        actions = self._record_answer(key, entry, members(event.result))
        if rec.outstanding:
            return actions
        return actions + self._send_answers(True)

    def _record_answer(self, key: str, entry: JsonView, result: JsonView) -> list[Action]:
        rec, method = self.record, entry["method"]
        answer = dict(result)
        if method in _INPUT_RESULT_DROP_META:
            answer.pop("_meta", None)  # not in the 2026-07-28 schema: the safe choice
        rec.answers[key] = answer
        params = members(entry.get("params"))
        if method == "elicitation/create" and params.get("mode") == "url" and answer.get("action") == "accept":
            rec.url_elicitations[rec.minted_ids[key]] = str(params.get("url"))
        if method == "roots/list" and self.ctx.cache_roots:
            return [StoreRoots(answer)]
        return []

    def _on_timer(self, event: TimerFired) -> list[Action]:
        rec, limits = self.record, self.ctx.limits
        if event.name is Timer.TOTAL and rec.task_id is not None:
            return []  # a task is bounded by task_total_seconds instead (Timer.TASK)
        if event.name is Timer.TASK:
            return [*self._cancel_outstanding(), AbortUpstream(),
                    *self._finish_error(E.limit_error("task_total_seconds", limits.task_total_seconds))]
        if event.name is Timer.TOTAL:
            return [*self._cancel_outstanding(), AbortUpstream(),
                    *self._finish_error(E.limit_error("total_timeout_seconds", limits.total_timeout_seconds))]
        if event.round != rec.round:
            return []
        if event.name is Timer.BACKOFF and rec.phase is Phase.BACKOFF:
            return self._retry()
        if event.name is Timer.POLL and rec.phase is Phase.TASK_WAIT:
            return self._poll()
        if event.name is Timer.CLIENT_ANSWER and rec.phase is Phase.AWAITING_CLIENT:
            return self._cancel_outstanding() + self._finish_error(
                E.limit_error("client_answer_timeout_seconds", limits.client_answer_timeout_seconds))
        return []

    # --- tasks (io.modelcontextprotocol/tasks; adapters.task_poll) --------------------------------------------
    def _send_answers(self, immediate: bool) -> list[Action]:
        """Every input of the round is answered: a task gets them with tasks/update, an MRTR round is retried."""
        rec = self.record
        if rec.task_id is None:
            return self._backoff_or_retry(immediate)
        rec.phase = Phase.TASK_UPDATE
        return [UpdateTask(rec.task_id, dict(rec.answers))]

    def _on_task_created(self, result: JsonValue) -> list[Action]:
        view, limits = TP.read_task(result, None), self.ctx.limits
        if isinstance(view, ErrorValue):
            return self._finish_error(view)
        if self.ctx.tasks_running() >= limits.max_tasks_per_session:
            return [CancelTask(view.task_id), TaskEnded(TaskOutcome.ABANDONED),
                    *self._finish_error(E.limit_error("max_tasks_per_session", limits.max_tasks_per_session))]
        self.record.task_id = view.task_id
        timer = ArmTimer(Timer.TASK, limits.task_total_seconds, 0)
        # Only a working task is waited for: any other status is fetched at once with its payload.
        return [timer, *self._task_moved(view), *(self._wait() if view.state is TaskState.WORKING else self._poll())]

    def _on_task(self, value: JsonValue) -> list[Action]:
        """A tasks/get answer (ext-tasks §Getting Tasks)."""
        rec = self.record
        if rec.method == "tasks/cancel":
            return self._legacy_task(value)
        view = TP.read_task(value, rec.task_id)
        if isinstance(view, ErrorValue):
            return self._finish_error(view)
        rec.task_failures = None
        moved = [*self._status_changed(members(value), view), *self._task_moved(view)]
        if view.state is TaskState.COMPLETED:
            outcome = classify_result(self._underlying, view.payload)
            if isinstance(outcome, Invalid):
                return [*moved, *self._finish_error(outcome.error)]
            done = [SendToClient(_elicitation_complete(eid)) for eid in rec.url_elicitations]
            result = response(rec.downstream_id, self._task_result(outcome.result)) if isinstance(
                outcome, Complete) else None
            if result is None:  # a task's result is final: it cannot ask for another round
                return [*moved, *self._finish_error(E.upstream_failure(
                    E.UpstreamFault.INVALID_RESULT, "the task's result is not complete"))]
            return [*moved, *done, TaskEnded(TaskOutcome.COMPLETED), self._end(result)]
        if view.state.terminal:
            outcome_ = TaskOutcome.FAILED if view.state is TaskState.FAILED else TaskOutcome.CANCELLED
            return [*moved, TaskEnded(outcome_), *self._finish_error(TP.ended_error(view))]
        if view.state is TaskState.INPUT_REQUIRED:
            asked = classify_result(self._underlying, {"resultType": "input_required",
                                                       "inputRequests": view.payload})
            if isinstance(asked, Invalid):
                return [*moved, *self._finish_error(asked.error)]
            rec.request_state = None
            return [*moved, *self._next_round(cast(InputRequired, asked))]
        return [*moved, *self._wait()]

    def _task_moved(self, view: TaskView) -> list[Action]:
        """Notes what the task shows; a new status message is the client's progress when it gave a token."""
        rec = self.record
        rec.task_poll_ms = view.poll_ms or rec.task_poll_ms
        if view.seen == rec.task_seen:
            rec.task_unchanged = (rec.task_unchanged or 0) + 1
            return []
        rec.task_seen, rec.task_unchanged = view.seen, None
        meta = rec.params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, Mapping) else None
        if token is None or not view.message:
            return []
        rec.task_progress = (rec.task_progress or 0) + 1
        return [SendToClient(TP.progress(token, rec.task_progress, view.message))]

    def _wait(self) -> list[Action]:
        rec, limits = self.record, self.ctx.limits
        rec.round += 1  # a new wait: an older poll timer is stale
        rec.phase = Phase.TASK_WAIT
        delay = TP.poll_delay(rec.task_poll_ms, rec.task_unchanged or 0, limits.task_poll_floor_seconds,
                              limits.task_poll_max_seconds)
        return [ArmTimer(Timer.POLL, delay, rec.round)]

    def _poll(self) -> list[Action]:
        """The next task call: answers whose tasks/update got no answer are sent again (the server ignores keys
        it already has: ext-tasks §Task Update Requests), else tasks/get."""
        rec = self.record
        assert rec.task_id is not None
        if rec.answers:
            rec.phase = Phase.TASK_UPDATE
            return [UpdateTask(rec.task_id, dict(rec.answers))]
        rec.phase = Phase.TASK_POLL
        return [PollTask(rec.task_id)]

    def _task_call_failed(self, error: ErrorValue) -> list[Action]:
        rec = self.record
        rec.task_failures = (rec.task_failures or 0) + 1
        if error.challenge is not None or rec.task_failures >= TP.TASK_CALL_FAILURES:
            return self._finish_error(error)
        rec.task_unchanged = (rec.task_unchanged or 0) + 1  # backs off like an unchanged poll
        return self._wait()

    def _settle_task(self, actions: list[Action], cancelled: bool) -> list[Action]:
        """A call that ends with its task still live upstream cancels it (ext-tasks §Cancelling Tasks): nobody
        would collect it. Its outcome is counted once."""
        task_id = self.record.task_id
        if self.record.method in LT.DRIVEN:  # a 2025 task lives on past its requests: only tasks/cancel ends it
            return [a for a in actions if not isinstance(a, TaskEnded)]
        if task_id is None or not self.done or any(isinstance(a, TaskEnded) for a in actions):
            return actions
        outcome = TaskOutcome.CLIENT_CANCELLED if cancelled else TaskOutcome.ABANDONED
        return [CancelTask(task_id), TaskEnded(outcome), *actions]

    # --- 2025 tasks (adapters.legacy_tasks) -----------------------------------------------------------------
    @property
    def _underlying(self) -> str:
        """The method a task's result and input requests belong to: a 2025 task is always a tools/call's."""
        return "tools/call" if self.record.method == "tasks/result" else self.record.method

    def _task_result(self, result: JsonObject) -> JsonObject:
        task_id = self.record.task_id
        return LT.with_related(result, task_id) if self.record.method == "tasks/result" and task_id else result

    def _legacy_created(self, result: JsonValue) -> list[Action]:
        """A task-augmented call's answer: its CreateTaskResult, the task kept in the session's registry."""
        view = TP.read_task(result, None)
        if isinstance(view, ErrorValue):
            return self._finish_error(view)
        task = LT.to_legacy(members(result))
        # LT.created_result's CreateTaskResult, from the task it keeps
        return [RememberTask(task, True), self._end(response(self.record.downstream_id, {"task": task}))]

    def _legacy_task(self, value: JsonValue) -> list[Action]:
        """tasks/get or tasks/cancel: the upstream task as a 2025 Task (2025-11-25 basic/utilities/tasks §Getting
        Tasks, §Cancelling Tasks)."""
        view = TP.read_task(value, str(self.record.params["taskId"]))
        if isinstance(view, ErrorValue):
            return self._finish_error(view)
        task = LT.to_legacy(members(value))
        return [RememberTask(task), self._end(response(self.record.downstream_id, task))]

    def _status_changed(self, value: JsonView, view: TaskView) -> list[Action]:
        """While tasks/result waits: a new status is kept and told (notifications/tasks/status)."""
        if self.record.method != "tasks/result" or view.seen == self.record.task_seen:
            return []
        task = LT.to_legacy(value)
        return [RememberTask(task), SendToClient(LT.status_notification(task))]

    # --- endings ----------------------------------------------------------------------------------------
    def _cancel_outstanding(self) -> list[SendToClient]:
        """notifications/cancelled for every gateway->client request still open (2025-11-25 basic/utilities
        §Cancellation)."""
        out = [SendToClient({"jsonrpc": "2.0", "method": "notifications/cancelled",
                             "params": {"requestId": gid, "reason": "the original request ended"}})
               for gid in self.record.outstanding]
        self.record.outstanding = {}
        return out

    def _finish_error(self, error: ErrorValue) -> list[Action]:
        return [self._end(response(self.record.downstream_id, error=error), error.log, error.challenge)]

    def _end(self, message: JsonObject | None, log: str | None = None,
             challenge: AuthChallenge | None = None) -> Finish:
        self.record.phase = Phase.DONE
        return Finish(message, log, challenge)


def _elicitation_complete(elicitation_id: str) -> JsonObject:
    return {"jsonrpc": "2.0", "method": "notifications/elicitation/complete",
            "params": {"elicitationId": elicitation_id}}
