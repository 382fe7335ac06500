"""Tournament players: checkpoints (a policy of a run's checkpoint), model directories, scripted
twins and chat endpoints, and the settings (prompts, message limit) each model player brings from its run."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from cogym.agents.embedded import EMBEDDED_MODELS
from cogym.agents.endpoint import EndpointConfig, has_userinfo, without_userinfo
from cogym.core.types import SamplingParams
from cogym.core.types import Agent
from cogym.core.errors import ConfigError
from cogym.runners.config.safe_yaml import parse_yaml, read_yaml_file
from cogym.runners.config.load import build_section
from cogym.runners.rollout.agents import twin_name
from cogym.runners.rollout.loop import chat_messages


# ------------------------------------------------------------------------------------------ players
@dataclass(frozen=True)
class Player:
    """One entrant: ``path`` (an HF model directory) or ``twin`` (a scripted strategy name).
    A checkpoint's player also carries its run's per-role system prompts and message limit.
    ``bind``: the roles or seats it plays (paired scoring), None for a player that takes a side.
    ``sources``: where its prompts and limit came from, filled in by :func:`settle`.
    ``dtype`` / ``attn_implementation``: what its run loaded the policy with (``policies.<id>`` of
    the run's config.yaml), so a bf16 run's checkpoint plays in bf16, as it was trained; None for
    a model with no run config (``Policy.from_pretrained``'s defaults: float32, transformers' kernel)."""

    name: str
    path: Path | None = None
    twin: str | None = None
    prompts: dict | None = field(default=None, compare=False)
    max_new_tokens: int | None = None
    bind: tuple[str, ...] | None = None
    run_config: bool = field(default=False, compare=False)  # a checkpoint whose run's config.yaml was read
    role_limits: dict | None = field(default=None, compare=False)  # role -> the limit its run gave the role's policy
    sources: dict | None = field(default=None, compare=False)
    dtype: str | None = None
    attn_implementation: str | None = None
    endpoint: EndpointConfig | None = None  # a chat endpoint plays (frozen; :mod:`cogym.agents.endpoint`)

    def load_options(self) -> dict:
        """The keyword arguments of ``Policy.from_pretrained`` this player is loaded with."""
        return {"dtype": self.dtype or "float32", "attn_implementation": self.attn_implementation}


def _checkpoint_policy(step: Path, policy: str | None, seated: str | None = None) -> tuple[Path, bool]:
    """The policy directory that plays, and whether the checkpoint holds several. ``seated``: the
    policy the run seated in the player's bound role (picks it when no policy is named)."""
    policies = sorted(p.name for p in (step / "policies").iterdir() if p.is_dir())
    if policy is not None and policy in policies:
        return step / "policies" / policy, len(policies) > 1
    if len(policies) == 1:  # --policy names another run's policy: this checkpoint has one, it plays
        return step / "policies" / policies[0], False
    if policy is not None:
        raise ConfigError(f"checkpoint {step} has no policy {policy!r} (it has: {', '.join(policies)})")
    if seated in policies:
        return step / "policies" / seated, True
    raise ConfigError(f"checkpoint {step} holds policies {', '.join(policies)}; pick one with --policy "
                      "(or PATH:POLICY for this player, or bind it to a role its run seats one of them in: "
                      "--role ROLE or PATH@ROLE)")


def _run_tree(run: Path) -> dict | None:
    """The run's resolved config (``<run>/config.yaml``), None when there is none."""
    config = run / "config.yaml"
    if not config.is_file():
        return None
    tree = read_yaml_file(config, "run config") or {}  # another's run directory: read under the config bounds
    if not isinstance(tree, dict):
        raise ConfigError(f"{config} must hold a mapping at the top level, got {type(tree).__name__}")
    return tree


def _run_settings(run: Path, policy: str) -> tuple[dict | None, int | None]:
    """The run's per-role system prompts and the policy's max_new_tokens (``<run>/config.yaml``)."""
    tree = _run_tree(run)
    if tree is None:
        return None, None
    prompts = {role: (v or {}).get("system", "") for role, v in (tree.get("prompts") or {}).items()}
    return prompts, _policy_limit(tree, policy)


def _policy_limit(tree: dict, policy: str) -> int | None:
    return (((tree.get("policies") or {}).get(policy) or {}).get("sampling") or {}).get("max_new_tokens")


def _policy_loading(tree: dict | None, policy: str) -> tuple[str | None, str | None]:
    """The ``dtype`` and ``attn_implementation`` the run loaded policy ``policy`` with
    (``policies.<policy>`` of its config.yaml; None where it does not say)."""
    cfg = ((tree or {}).get("policies") or {}).get(policy) or {}
    dtype, attn = cfg.get("dtype"), cfg.get("attn_implementation")
    return (str(dtype) if dtype is not None else None), (str(attn) if attn is not None else None)


def _role_limits(run: Path) -> dict[str, int]:
    """The message limit the run gave each role (or seat) it seated a model policy in."""
    tree = _run_tree(run) or {}
    policies = tree.get("policies") or {}
    return {role: _policy_limit(tree, pid) or default_limit() for role, pid in (tree.get("seats") or {}).items()
            if isinstance(pid, str) and pid in policies}


def split_binding(spec: str, role: str | None = None) -> tuple[str, tuple[str, ...] | None]:
    """``PLAYER@ROLE`` -> ``(PLAYER, (ROLE,))``; ``PLAYER@SEAT,SEAT`` binds seats. A spec without
    ``@`` takes ``role`` (``--role``, comma-separated seats allowed), or None: no binding. A path
    that exists as written is never split."""
    def names(text: str) -> tuple[str, ...]:
        return tuple(n.strip() for n in text.split(",") if n.strip())

    if "@" in spec and not Path(spec).exists():
        head, tail = spec.rsplit("@", 1)
        if not head or not names(tail):
            raise ConfigError(f"player {spec!r}: write PLAYER@ROLE or PLAYER@SEAT,SEAT, e.g. scripted:exact@hinter")
        return head, names(tail)
    if role is not None and not names(role):
        raise ConfigError(f"--role {role!r}: name a role or seats, e.g. --role hinter")
    return spec, names(role) if role is not None else None


ENDPOINT_PREFIX = "endpoint:"


def endpoint_player(entry: str | dict, role: str | None = None) -> Player:
    """An endpoint player from the command line, ``endpoint:BASE_URL?model=M&api_key_env=VAR&name=N[@ROLE]``
    (any other EndpointConfig key as a query parameter too), or from a YAML mapping ``{name: N, endpoint:
    {base_url, model, api_key_env, ...}, role: R}``. The name defaults to the model's."""
    if isinstance(entry, str):
        if has_userinfo(entry[len(ENDPOINT_PREFIX):]):  # before its @ is read as a role binding and quoted
            raise ConfigError(f"player {without_userinfo(entry)[:200]!r}: base_url must not hold a user name or password "
                              "(user:password@host); put the endpoint's key in an environment variable, api_key_env=VAR")
        spec, bind = split_binding(entry, role)
        url = urlsplit(spec[len(ENDPOINT_PREFIX):])
        text_keys = {"name", "base_url", "model", "api_key_env"}
        keys: dict[str, Any] = {k: (v if k in text_keys or not v else parse_yaml(v, f"query parameter {k}"))
                                for k, v in parse_qsl(url.query, keep_blank_values=True)}
        name = keys.pop("name", None)
        keys["base_url"] = urlunsplit((url.scheme, url.netloc, url.path, "", ""))
        where = f"player {spec.split('?', 1)[0]!r}"
    else:
        unknown = sorted(set(entry) - {"name", "endpoint", "role"})
        if unknown or not isinstance(entry.get("endpoint"), dict):
            raise ConfigError(f"tournament.players: a mapping player is {{name: N, endpoint: {{base_url, model, api_key_env, "
                              f"...}}, role: R}}; got keys {', '.join(sorted(entry))}")
        keys, name = dict(entry["endpoint"]), entry.get("name")
        spec_role = entry.get("role", role)
        bind = split_binding("x", str(spec_role))[1] if spec_role is not None else None
        where = f"player {name or keys.get('model')!r}"
    config = build_section(EndpointConfig, keys, f"{where}: endpoint")
    return Player(name=str(name or config.model), endpoint=config, bind=bind)


def resolve_players(specs: Sequence[str | dict], policy: str | None = None, role: str | None = None,
                    minimum: int = 2) -> list[Player]:
    """Players from command-line specs: ``scripted:<twin>``, an HF model directory, ``tiny``, a
    checkpoint directory (``.../checkpoints/step_N``) or a run directory (each of its complete
    checkpoints); ``PATH:POLICY`` picks a checkpoint's policy; ``SPEC@ROLE`` (or ``@SEAT,SEAT``)
    binds the player to a role or seats, and ``role`` binds every player without its own ``@``.
    A player bound to one role of a multi-policy checkpoint plays the policy its run seated there.
    Names are stable: ``<run>/step_N`` for checkpoints, the directory name for a model; a binding
    is not part of the name."""
    players: list[Player] = []
    for full in specs:
        if isinstance(full, dict) or full.startswith(ENDPOINT_PREFIX):
            players.append(endpoint_player(full, role))
            continue
        spec, bind = split_binding(full, role)
        if twin_name(spec) is not None:
            if not twin_name(spec):
                raise ConfigError(f"player {full!r}: name the twin, e.g. scripted:random (`cogym games` lists them)")
            players.append(Player(name=spec, twin=twin_name(spec), bind=bind))
            continue
        path, own_policy = Path(spec), policy
        if ":" in spec and not path.exists():  # PATH:POLICY
            head, own_policy = spec.rsplit(":", 1)
            path = Path(head)
        if (path / "policies").is_dir() and (path / "trainer_state.json").is_file():
            steps = [path]
        elif (path / "checkpoints").is_dir():
            steps = sorted(p for p in (path / "checkpoints").glob("step_*") if (p / "trainer_state.json").is_file())
            if not steps:
                raise ConfigError(f"player {full!r}: the run has no complete checkpoint under {path / 'checkpoints'}")
        elif (path / "config.json").is_file() or (path / "adapter_config.json").is_file() or spec in EMBEDDED_MODELS:
            players.append(Player(name=spec if spec in EMBEDDED_MODELS else path.name, path=path, bind=bind))
            continue
        else:
            raise ConfigError(f"player {full!r} is not scripted:<twin>, a model directory, 'tiny' or 'tiny-verifier', a checkpoint or a run "
                              "directory (optionally :POLICY, then @ROLE)")
        for step in steps:
            run = step.parent.parent
            tree = _run_tree(run)
            seats = (tree or {}).get("seats") or {}
            seated = seats.get(bind[0]) if bind is not None and len(bind) == 1 else None
            where, several = _checkpoint_policy(step, own_policy, seated if isinstance(seated, str) else None)
            prompts, limit = _run_settings(run, where.name)
            dtype, attn = _policy_loading(tree, where.name)
            name = f"{run.name}/{step.name}" + (f"/{where.name}" if several else "")
            players.append(Player(name=name, path=where, prompts=prompts, max_new_tokens=limit, bind=bind,
                                  run_config=prompts is not None, role_limits=_role_limits(run), dtype=dtype,
                                  attn_implementation=attn))
    names = [p.name for p in players]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"players named twice: {', '.join(dupes)} (each player must appear once)")
    if len(players) < minimum:
        raise ConfigError(f"a tournament needs at least 2 players, got {len(players)}")
    return players


class Prompted:
    """A model player with its own system prompts: rewrites each request's system message for its
    role, then asks the agent (the rollout builds messages with the tournament's prompts)."""

    def __init__(self, agent: Agent, prompts: dict[str, str]) -> None:
        self.agent, self.prompts, self.name = agent, prompts, agent.name

    def _rewrite(self, requests):
        """Each request with this player's system message (its sampling key and conversation kept)."""
        out = []
        for r in requests:
            system = self.prompts.get(r.role, "")
            conversation = r.conversation
            if conversation is not None:  # a conversation role: its first prompt starts with the system message
                rest = conversation[1:] if conversation and conversation[0].get("role") == "system" else conversation
                conversation = ([{"role": "system", "content": system}] if system else []) + list(rest)
            out.append(replace(r, messages=chat_messages(system, r.messages[-1]["content"]), conversation=conversation))
        return out

    def act(self, requests):
        return self.agent.act(self._rewrite(requests))

    # Token level (TokenStreaming): the same rewrite when a message begins, the rest delegated.
    def begin(self, requests, encode):
        if not hasattr(self.agent, "begin"):
            raise TypeError(f"player {self.name!r} ({type(self.agent).__name__}) cannot play at token level")
        return self.agent.begin(self._rewrite(requests), encode)

    def advance(self, handles):
        return self.agent.advance(handles)

    def close(self, handles):
        self.agent.close(handles)


def fixed_player(who: str, where: str) -> Player:
    """A fixed model agent (a model directory, ``tiny``, or one checkpoint, ``PATH[:POLICY]``)."""
    try:
        found = resolve_players([who], minimum=1)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    if len(found) != 1:
        raise ConfigError(f"{where}: {who} holds {len(found)} checkpoints; a fixed seat needs one "
                          "(e.g. RUN/checkpoints/step_N[:POLICY])")
    return replace(found[0], name=who, bind=None)


def default_limit() -> int:
    """The message limit a run without ``sampling.max_new_tokens`` trained with."""
    return SamplingParams.max_new_tokens
