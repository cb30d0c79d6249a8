"""A state the size of a real database reaches the simulator as the records each call names, whole, at a cost
that follows the call, not the state: tau2-bench's retail database (users, orders, products), generated here at
a few megabytes and ten times that."""

from __future__ import annotations

import asyncio
import json
import random
import threading
from pathlib import Path
from typing import Any

import pytest
from simia.sim import World, load_world
from simia.sim.backends import ScriptedBackend
from simia.sim.engine import Simulator, StateIndexes, ToolCall, index, slicing, state_text, state_view, undeclared
from simia.sim.storage import SqliteCache
from simia.sim.world import State, apply_patch, as_state
from simia.sim.world import state as state_module
from simia.testing import parse_simulator_prompt

ROOT = Path(__file__).resolve().parents[2]
FIRST = ["Mia", "Omar", "Lena", "Yusuf", "Aarav", "Sofia", "Noah", "Chen", "Fatima", "Ivan", "Amelia", "Raj"]
LAST = ["Lee", "Haddad", "Kraus", "Garcia", "Khan", "Silva", "Novak", "Smith", "Moreau", "Tanaka", "Brown"]
CITIES = [("Austin", "TX"), ("Denver", "CO"), ("Portland", "OR"), ("Chicago", "IL"), ("Boston", "MA")]
PRODUCTS = ["T-Shirt", "Water Bottle", "Desk Lamp", "Backpack", "Sneakers", "Headphones", "Tea Kettle", "Jacket"]


def retail(users: int, *, seed: int = 7) -> dict[str, Any]:
    """A tau2-bench-shaped retail database: `users` users, about two orders each, a product per 10 users with
    a dozen variants each (about 1,700 characters a user in all)."""
    rng = random.Random(seed)
    products: dict[str, Any] = {}
    for p in range(max(4, users // 10)):
        pid = str(6_000_000_000 + p * 7919)
        variants = {}
        for v in range(12):
            item = str(1_000_000_000 + p * 1000 + v)
            options = {"color": rng.choice(["red", "blue", "black", "white"]), "size": rng.choice("SMLX")}
            price = round(rng.uniform(5, 300), 2)
            variants[item] = {"item_id": item, "options": options, "available": rng.random() < 0.8, "price": price}
        products[pid] = {"name": f"{PRODUCTS[p % len(PRODUCTS)]} {p}", "product_id": pid, "variants": variants}
    product_ids = list(products)
    people: dict[str, Any] = {}
    orders: dict[str, Any] = {}
    for u in range(users):
        first, last = rng.choice(FIRST), rng.choice(LAST)
        uid = f"{first.lower()}_{last.lower()}_{1000 + u}"
        city, state = rng.choice(CITIES)
        address = {
            "address1": f"{rng.randint(1, 999)} {rng.choice(['Elm', 'Oak', 'Pine', 'Main'])} Street",
            "address2": rng.choice(["", f"Suite {rng.randint(100, 999)}"]),
            "city": city,
            "country": "USA",
            "state": state,
            "zip": f"{10000 + (u * 7907) % 89999:05d}",
        }
        methods: dict[str, Any] = {}
        for m in range(rng.randint(1, 3)):
            kind = rng.choice(["credit_card", "gift_card", "paypal"])
            mid = f"{kind}_{u * 10 + m}"
            methods[mid] = {"source": kind, "id": mid}
            if kind == "credit_card":
                methods[mid]["brand"] = rng.choice(["visa", "mastercard"])
                methods[mid]["last_four"] = f"{rng.randint(0, 9999):04d}"
            elif kind == "gift_card":
                methods[mid]["balance"] = rng.randint(0, 300)
        mine = []
        for _ in range(rng.randint(1, 3)):
            oid = f"#W{1_000_000 + len(orders)}"
            mine.append(oid)
            items = []
            for pid in rng.sample(product_ids, rng.randint(1, 3)):
                item = rng.choice(list(products[pid]["variants"].values()))
                name = products[pid]["name"]
                line = {"name": name, "product_id": pid, "item_id": item["item_id"], "price": item["price"]}
                items.append(line | {"options": item["options"]})
            status = rng.choice(["pending", "processed", "delivered", "cancelled"])
            total = round(sum(i["price"] for i in items), 2)
            paid = rng.choice(list(methods))
            fulfilled = [] if status == "pending" else [{"tracking_id": [str(rng.randint(10**11, 10**12))],
                                                        "item_ids": [i["item_id"] for i in items]}]  # fmt: skip
            orders[oid] = {
                "order_id": oid,
                "user_id": uid,
                "address": dict(address),
                "items": items,
                "fulfillments": fulfilled,
                "status": status,
                "payment_history": [{"transaction_type": "payment", "amount": total, "payment_method_id": paid}],
            }
        people[uid] = {
            "user_id": uid,
            "name": {"first_name": first, "last_name": last},
            "address": address,
            "email": f"{first.lower()}.{last.lower()}{u}@example.com",
            "payment_methods": methods,
            "orders": mine,
        }
    return {"users": people, "orders": orders, "products": products, "store": "simia retail"}


@pytest.fixture(scope="module")
def big() -> State:
    """About 3 MB: tau2-bench's retail database is 2.4 MB."""
    return as_state(retail(1_800))


@pytest.fixture(scope="module")
def indexes() -> StateIndexes:
    return StateIndexes()


def shown(text: str) -> dict[str, Any]:
    """The state section of a prompt, parsed back."""
    view: dict[str, Any] = json.loads(text)
    return view


def calls_on(state: dict[str, Any], rng: random.Random) -> list[tuple[ToolCall, list[tuple[str, str]]]]:
    """One call of each tau2 retail kind on a random user, with the records it names (collection, key)."""
    uid = rng.choice(sorted(state["users"]))
    user = state["users"][uid]
    oid = user["orders"][0]
    order = state["orders"][oid]
    item = order["items"][0]
    product = state["products"][item["product_id"]]
    other = next(i for i in product["variants"] if i != item["item_id"])
    method = next(iter(user["payment_methods"]))
    u, o, p = ("users", uid), ("orders", oid), ("products", item["product_id"])
    address = {"address1": "1 New Road", "address2": "", "city": "Austin", "state": "TX", "country": "USA"}
    name = user["name"]
    return [
        (ToolCall("get_order_details", {"order_id": oid}), [o]),
        (ToolCall("get_user_details", {"user_id": uid}), [u]),
        (ToolCall("get_product_details", {"product_id": item["product_id"]}), [p]),
        (
            ToolCall(
                "modify_pending_order_items",
                {"order_id": oid, "item_ids": [item["item_id"]], "new_item_ids": [other], "payment_method_id": method},
            ),
            [o, p, u],
        ),
        (
            ToolCall(
                "return_delivered_order_items",
                {"order_id": oid, "item_ids": [item["item_id"]], "payment_method_id": method},
            ),
            [o, u],
        ),
        (ToolCall("modify_user_address", {"user_id": uid, **address, "zip": "99999"}), [u]),
        (
            ToolCall(
                "find_user_id_by_name_zip",
                {"first_name": name["first_name"], "last_name": name["last_name"], "zip": user["address"]["zip"]},
            ),
            [u],
        ),
        (ToolCall("find_user_id_by_email", {"email": user["email"]}), [u]),
        (ToolCall("cancel_pending_order", {"order_id": oid, "reason": "no longer needed"}), [o, u]),
    ]


def test_every_call_on_a_database_sized_state_shows_the_records_it_names_whole(
    big: State, indexes: StateIndexes
) -> None:
    rng, checked = random.Random(1), 0
    for _ in range(30):
        for call, records in calls_on(big, rng):
            view = state_view(indexes.index_of(big), call.arguments, 3_000)
            state = shown(view.text)
            for collection, key in records:
                assert state[collection][key] == big[collection][key], (call, collection, key)
                checked += 1
            assert len(view.text) < view.named_chars + 2 * 3_000 + 400  # references and context: 3,000 each
    assert checked == 30 * 13


def test_a_large_state_shows_an_orders_user_and_counts_every_collections_hidden_records(
    big: State, indexes: StateIndexes
) -> None:
    oid = next(iter(big["orders"]))
    state = shown(state_view(indexes.index_of(big), {"order_id": oid}, 3_000).text)
    order = big["orders"][oid]
    assert state["orders"][oid] == order
    assert state["users"][order["user_id"]] == big["users"][order["user_id"]]  # referenced by key, whole
    assert state["store"] == "simia retail"  # a plain top-level value, as it is
    for name in ("users", "orders", "products"):
        hidden = len(big[name]) - (len(state[name]) - 1)
        assert state[name]["..."] == f"{hidden} other record(s) not shown; they exist unchanged"
    assert len(json.dumps(state)) < sum(len(json.dumps(r)) for r in (order, big["users"][order["user_id"]])) + 7_000


def test_a_patched_state_finds_its_changed_and_added_records_and_not_its_removed_ones(
    big: State, indexes: StateIndexes
) -> None:
    uid, gone = sorted(big["users"])[:2]
    email = big["users"][uid]["email"]
    patched = apply_patch(
        big,
        [
            {"op": "replace", "path": f"/users/{uid}/email", "value": "new.address@example.org"},
            {"op": "add", "path": "/users/zoe_new_1", "value": {"user_id": "zoe_new_1", "email": "zoe@example.org"}},
            {"op": "remove", "path": f"/users/{gone}"},
        ],
        None,
    )
    assert isinstance(patched, State) and patched.base is big
    indexed = indexes.index_of(patched)
    assert indexed.holders("users", "new.address@example.org") == [uid]
    assert indexed.holders("users", email) == []
    assert indexed.holders("users", "zoe@example.org") == ["zoe_new_1"]
    assert indexed.holders("users", big["users"][gone]["email"]) == []
    state = shown(state_view(indexed, {"email": "zoe@example.org"}, 3_000).text)
    assert state["users"]["zoe_new_1"] == {"user_id": "zoe_new_1", "email": "zoe@example.org"}
    state = shown(state_view(indexed, {"user_id": gone}, 3_000).text)
    assert gone not in state["users"]
    assert indexes.builds == 1  # the base's index serves every state derived from it


def test_a_rewritten_collection_is_re_indexed_by_the_records_it_changed() -> None:
    base = as_state({"log": [{"event": f"e{i}", "by": f"user{i}"} for i in range(200)], "n": 1})
    appended = apply_patch(base, [{"op": "add", "path": "/log/-", "value": {"event": "late", "by": "zed"}}], None)
    indexed = StateIndexes().index_of(appended)
    assert indexed.holders("log", "zed") == [200] and indexed.holders("log", "user7") == [7]
    state = shown(state_view(indexed, {"who": "zed"}, 500).text)
    assert state["log"]["200"] == {"event": "late", "by": "zed"}
    assert state["log"]["..."].startswith("197 other record(s) not shown")  # 201, less it and 3 neighbours


def test_a_small_state_whose_named_records_overflow_the_budget_shows_them_whole_not_cut() -> None:
    """A state of a few times the budget is sliced by walking it, as before; but when the records a call
    names are over the budget that slice cut them (`<N characters not shown>`): they are shown whole now."""
    products = {f"P{i}": {"name": f"p{i}", "notes": ["x" * 40] * 40} for i in range(4)}  # ~1,800 characters each
    state = {"products": products, "currency": "USD"}
    text, sliced = state_text(state, {"product_ids": ["P1", "P2"]}, 3_000)
    view = shown(text)
    assert sliced and view["products"]["P1"] == products["P1"] and view["products"]["P2"] == products["P2"]
    assert view["currency"] == "USD"
    assert (view["products"]["P0"], view["products"]["P3"]) == ({"name": "p0"}, {"name": "p3"})  # stubs


class Counted:
    """Counts the characters the slicer serializes and the records the index walks."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.chars = self.records = 0
        serialize, walk = slicing.compact_json, index.record_needles

        def counted_json(value: Any) -> str:
            text = serialize(value)
            self.chars += len(text)
            return text

        def counted_walk(key: Any, record: Any) -> Any:
            self.records += 1
            return walk(key, record)

        monkeypatch.setattr(slicing, "compact_json", counted_json)
        monkeypatch.setattr(index, "record_needles", counted_walk)
        monkeypatch.setattr(index, "compact_json", counted_json)


def test_the_work_of_a_call_does_not_grow_with_the_state(monkeypatch: pytest.MonkeyPatch) -> None:
    work = []
    for users in (150, 1_500):
        state = as_state(retail(users))
        indexes = StateIndexes()
        indexes.index_of(state)  # once per base, off the event loop in a served simulator
        uid = sorted(state["users"])[3]
        oid = state["users"][uid]["orders"][0]
        patched = apply_patch(state, [{"op": "replace", "path": f"/orders/{oid}/status", "value": "cancelled"}], None)
        again = apply_patch(patched, [{"op": "replace", "path": f"/users/{uid}/email", "value": "x@example.org"}], None)
        counted = Counted(monkeypatch)
        rng = random.Random(2)
        for target in (state, patched, again):
            for _ in range(5):
                for call, _records in calls_on(target, rng):
                    state_view(indexes.index_of(target), call.arguments, 3_000)
        work.append((counted.chars, counted.records))
        monkeypatch.undo()
    (small_chars, small_records), (large_chars, large_records) = work
    assert large_chars < 2 * small_chars, work  # ten times the state, the same order of work
    assert large_records == small_records == 2, work  # the patched order, then the patched user: once each


@pytest.fixture
def retail_world() -> World:
    """Retail with every call model-answered (what the state decides is answered without looking at its size)."""
    return undeclared(load_world(ROOT / "tool_specs" / "retail"))


async def test_a_call_whose_named_records_exceed_the_limit_is_refused_without_a_model_call(
    retail_world: World, big: State
) -> None:
    world = retail_world.model_copy(
        update={"simulator": retail_world.simulator.model_copy(update={"max_named_chars": 1_000})}
    )
    pid = next(iter(big["products"]))
    backend = ScriptedBackend([])
    step = await Simulator(backend).step(world, big, [], ToolCall("get_product_details", {"product_id": pid}))
    size = len(json.dumps(big["products"][pid], separators=(",", ":")))
    assert (step.is_error, step.error_kind, step.error_code, step.attempts) == (True, "infra", "state_too_large", 0)
    assert step.text == "The tool cannot answer this call: the records it names are too large to process."
    assert step.detail == (
        f"the records this call names take {size:,} characters (products/{pid} ({size:,} characters)), over the "
        f"limit of 1,000 the simulator may be shown (simulator.max_named_chars); raise simulator.max_named_chars "
        f"in {world.source}/world.yaml to simulate such calls"
    )
    assert step.state is big and backend.requests == []


async def test_concurrent_first_calls_on_a_base_share_one_index_build_off_the_event_loop(
    big: State, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[threading.Thread] = []
    build = index.StateIndex

    def recorded(base: State) -> index.StateIndex:
        threads.append(threading.current_thread())
        return build(base)

    monkeypatch.setattr(index, "StateIndex", recorded)
    indexes = StateIndexes()
    derived = apply_patch(big, [{"op": "replace", "path": "/store", "value": "renamed"}], None)
    views = await asyncio.gather(*(indexes.aindex_of(s) for s in (big, derived, big)))
    assert indexes.builds == 1 and {id(v.index) for v in views} == {id(indexes.cached(big))}
    assert len(threads) == 1 and threads[0] is not threading.main_thread()


def answer_with(order: dict[str, Any]) -> dict[str, Any]:
    output = {k: order[k] for k in ("order_id", "user_id", "status", "items")}
    return {"is_error": False, "error_code": None, "message": "ok", "output": output, "state_patch": []}


async def test_a_served_call_on_a_large_state_prompts_with_its_record_and_is_cached_by_digest(
    retail_world: World, big: State, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(state: dict[str, Any]) -> str:
        raise AssertionError("a call re-hashed the whole state")

    monkeypatch.setattr(state_module, "state_hash", never)
    oid = sorted(big["orders"])[5]
    patch = [{"op": "replace", "path": f"/orders/{oid}/status", "value": "processed"}]
    once, again = (apply_patch(big, patch, retail_world.state_schema) for _ in range(2))
    assert once is not again and once.digest == again.digest
    call, cache = ToolCall("get_order_details", {"order_id": oid}), SqliteCache(tmp_path / "cache.db")
    first, indexes = ScriptedBackend([answer_with(once["orders"][oid])]), StateIndexes()
    a = await Simulator(first, cache=cache, indexes=indexes).step(retail_world, once, [], call, seed=5)
    _, _, view = parse_simulator_prompt(str(first.requests[0].messages[1]["content"]))
    assert view["orders"][oid] == once["orders"][oid] and view["orders"][oid]["status"] == "processed"
    replayed = ScriptedBackend([])  # fails if asked
    b = await Simulator(replayed, cache=cache, indexes=indexes).step(retail_world, again, [], call, seed=5)
    assert (b.cached, b.output, replayed.requests) == (True, a.output, [])  # the same content: the same key
    unchanged = ScriptedBackend([answer_with(big["orders"][oid])] * 2)
    for _ in range(2):
        await Simulator(unchanged, cache=cache, indexes=indexes).step(retail_world, big, [], call, seed=5)
    assert len(unchanged.requests) == 1  # another state misses, then the unchanged state hits
