"""A workflow's graph as SVG geometry, laid out here so the page needs no script or library.

Nodes go in columns by longest-path layer (a node sits one column right of its
furthest upstream), so every edge points right. Inside a column the order is
the mean row of the node's upstream nodes, then the order the nodes were given
in: the same graph is always drawn the same way. A page must stay cheap for a
10,000-node workflow, so only a bounded part is drawn (``MAX_PER_LAYER`` rows a
column, ``MAX_LAYERS`` columns); a column with more says how many it leaves out,
and the page's table lists every node.
"""

from __future__ import annotations

import uuid
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field

from django.utils.text import Truncator
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

#: The most nodes drawn in one column, and the most columns drawn.
MAX_PER_LAYER = 16
MAX_LAYERS = 16

NODE_WIDTH = 168
NODE_HEIGHT = 40
COLUMN_GAP = 56
ROW_GAP = 12
MARGIN = 12
MORE_HEIGHT = 22


def longest_path_layers(
    order: Sequence[Hashable], edges: Sequence[tuple[Hashable, Hashable]]
) -> dict[Hashable, int]:
    """Each node's layer: 0 without upstream nodes, else one more than its deepest upstream.

    Edges naming a node not in ``order`` are ignored. A cycle (refused when a
    workflow is built, so only in hand-made data) cannot loop forever: its nodes
    are put one layer after the deepest node placed before it.
    """
    known = set(order)
    upstream: dict[Hashable, list[Hashable]] = {node: [] for node in order}
    downstream: dict[Hashable, list[Hashable]] = {node: [] for node in order}
    for up, down in edges:
        if up in known and down in known and up != down:
            upstream[down].append(up)
            downstream[up].append(down)
    waiting = {node: len(ups) for node, ups in upstream.items()}
    layer: dict[Hashable, int] = {}
    ready = [node for node in order if waiting[node] == 0]
    position = {node: index for index, node in enumerate(order)}
    while len(layer) < len(order):
        if not ready:  # a cycle: break it at its first node in the given order
            ready = [min((node for node in order if node not in layer), key=position.__getitem__)]
        next_ready: list[Hashable] = []
        for node in ready:
            if node in layer:
                continue
            layer[node] = 1 + max((layer[up] for up in upstream[node] if up in layer), default=-1)
            for down in downstream[node]:
                waiting[down] -= 1
                if waiting[down] == 0:
                    next_ready.append(down)
        ready = sorted(next_ready, key=position.__getitem__)
    return layer


@dataclass(frozen=True)
class DrawnNode:
    """One node's box: geometry and the text it shows (escaped by the template)."""

    id: uuid.UUID
    name: str
    label: str
    task: str
    status: str
    status_label: str
    url: str
    title: str
    x: int
    y: int
    text_x: int
    name_y: int
    status_y: int


@dataclass(frozen=True)
class DrawnEdge:
    path: str
    status: str


@dataclass(frozen=True)
class MoreNote:
    """The note under a column that leaves nodes out."""

    x: int
    y: int
    text: str


@dataclass
class Graph:
    """What the template draws, and what the page says about what it left out."""

    width: int
    height: int
    title: str
    description: str
    nodes: list[DrawnNode] = field(default_factory=list)
    edges: list[DrawnEdge] = field(default_factory=list)
    more: list[MoreNote] = field(default_factory=list)
    #: Nodes known to the layout but not drawn (columns or layers cut).
    hidden: int = 0
    #: Whether the layout saw only part of the workflow (its first edges).
    partial: bool = False
    node_width: int = NODE_WIDTH
    node_height: int = NODE_HEIGHT


@dataclass(frozen=True)
class NodeInfo:
    name: str
    task: str
    status: str
    status_label: str
    url: str


def choose(
    order: Sequence[uuid.UUID], edges: Sequence[tuple[uuid.UUID, uuid.UUID]]
) -> tuple[dict[uuid.UUID, tuple[int, int]], dict[int, int]]:
    """Which nodes are drawn where: id → (column, row), and per column how many are left out."""
    layers = longest_path_layers(order, edges)
    upstream: dict[uuid.UUID, list[uuid.UUID]] = {}
    for up, down in edges:
        upstream.setdefault(down, []).append(up)
    position = {node: index for index, node in enumerate(order)}
    columns: dict[int, list[uuid.UUID]] = {}
    for node in order:
        columns.setdefault(int(layers[node]), []).append(node)
    placed: dict[uuid.UUID, tuple[int, int]] = {}
    left_out: dict[int, int] = {}
    for column in sorted(columns)[:MAX_LAYERS]:
        members = columns[column]

        def weight(node: uuid.UUID) -> tuple[float, int]:
            rows = [placed[up][1] for up in upstream.get(node, []) if up in placed]
            return (sum(rows) / len(rows) if rows else -1.0, position[node])

        members.sort(key=weight)
        for row, node in enumerate(members[:MAX_PER_LAYER]):
            placed[node] = (column, row)
        if len(members) > MAX_PER_LAYER:
            left_out[column] = len(members) - MAX_PER_LAYER
    for column in sorted(columns)[MAX_LAYERS:]:
        left_out[MAX_LAYERS] = left_out.get(MAX_LAYERS, 0) + len(columns[column])
    return placed, left_out


def build_graph(
    order: Sequence[uuid.UUID],
    edges: Sequence[tuple[uuid.UUID, uuid.UUID]],
    info: Mapping[uuid.UUID, NodeInfo],
    *,
    title: str,
    partial: bool,
    total: int,
    placement: tuple[dict[uuid.UUID, tuple[int, int]], dict[int, int]] | None = None,
) -> Graph:
    """Lay out the nodes of ``order`` (``info`` for the ones to draw) and their edges."""
    placed, left_out = placement if placement is not None else choose(order, edges)
    rows = max([row + 1 for _, row in placed.values()] or [0])
    columns = max([column + 1 for column, _ in placed.values()] or [0])
    has_more = bool(left_out)
    width = 2 * MARGIN + max(columns, 1) * (NODE_WIDTH + COLUMN_GAP) - COLUMN_GAP
    if MAX_LAYERS in left_out:
        width += COLUMN_GAP + NODE_WIDTH
    body = max(rows, 1) * (NODE_HEIGHT + ROW_GAP) - ROW_GAP
    height = 2 * MARGIN + body + (MORE_HEIGHT if has_more else 0)

    def top(column: int, row: int) -> int:
        count = min(sum(1 for c, _ in placed.values() if c == column), MAX_PER_LAYER)
        offset = (rows - count) * (NODE_HEIGHT + ROW_GAP) // 2
        return MARGIN + offset + row * (NODE_HEIGHT + ROW_GAP)

    column_tops: dict[int, int] = {}
    drawn: list[DrawnNode] = []
    for node in order:
        if node not in placed or node not in info:
            continue
        column, row = placed[node]
        x = MARGIN + column * (NODE_WIDTH + COLUMN_GAP)
        y = column_tops.setdefault(column, top(column, 0)) + row * (NODE_HEIGHT + ROW_GAP)
        meta = info[node]
        drawn.append(
            DrawnNode(
                id=node,
                name=meta.name,
                label=Truncator(meta.name).chars(22),
                task=meta.task,
                status=meta.status,
                status_label=meta.status_label,
                url=meta.url,
                title=_("%(name)s (task %(task)s): %(status)s")
                % {"name": meta.name, "task": meta.task, "status": meta.status_label},
                x=x,
                y=y,
                text_x=x + 10,
                name_y=y + 16,
                status_y=y + 32,
            )
        )
    boxes = {node.id: node for node in drawn}
    lines = []
    for up, down in edges:
        if up in boxes and down in boxes:
            a, b = boxes[up], boxes[down]
            x1, y1 = a.x + NODE_WIDTH, a.y + NODE_HEIGHT // 2
            x2, y2 = b.x, b.y + NODE_HEIGHT // 2
            middle = (x1 + x2) // 2
            lines.append(
                DrawnEdge(f"M{x1} {y1} C{middle} {y1} {middle} {y2} {x2 - 6} {y2}", a.status)
            )
    more = []
    for column, count in sorted(left_out.items()):
        text = ngettext("+%(count)d more node", "+%(count)d more nodes", count) % {"count": count}
        x = MARGIN + column * (NODE_WIDTH + COLUMN_GAP)
        more.append(MoreNote(x=x, y=height - MARGIN, text=text))
    hidden = total - len(drawn)
    description = ngettext(
        "%(drawn)d of %(total)d node drawn, in columns by dependency depth.",
        "%(drawn)d of %(total)d nodes drawn, in columns by dependency depth.",
        total,
    ) % {"drawn": len(drawn), "total": total}
    return Graph(
        width=width,
        height=height,
        title=title,
        description=description,
        nodes=drawn,
        edges=lines,
        more=more,
        hidden=max(hidden, 0),
        partial=partial,
    )
