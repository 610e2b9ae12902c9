"""A plan as a graph: its operators, the iterators they pull from, the actors behind its
sources and the queues and buffers between its branches, read from the iterators
themselves (each keeps the iterators it pulls from; an operator names the queue or buffer
it hands items to, a source the one it takes them from). Printed as text, Mermaid or DOT,
or drawn as a PNG (with matplotlib, the ``plot`` extra; notebooks show it inline).

Examples:
    >>> from flowrl.core.iter import LocalIterator
    >>> plan = LocalIterator.from_items([1, 2, 3]).for_each(abs).batch(2)
    >>> print(plan_graph(plan).to_text())
    1  LocalIterator[items]
    2  for_each(abs)         <- 1
    3  batch(2)              <- 2
"""

from __future__ import annotations

import io
import textwrap
from dataclasses import dataclass, field
from typing import Any

from flowrl.core.config import ConfigError
from flowrl.core.iter import walk

FORMATS = ("text", "mermaid", "dot", "png")


@dataclass(frozen=True)
class Node:
    """``kind``: ``actors`` (Ray actors behind a source), ``remote`` (a transform that runs
    on them), ``source``, ``step``, or ``queue`` (a queue, buffer or learner thread)."""

    id: str
    label: str
    kind: str
    role: str | None = None


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    queue: bool = False  # items handed over through a queue or buffer, not pulled


@dataclass
class PlanGraph:
    """Nodes in an order where every edge points forward, and the edges between them."""

    nodes: list[Node]
    edges: list[Edge]
    title: str = ""
    _png: bytes | None = field(default=None, repr=False)

    def inputs(self, node_id: str) -> list[str]:
        return [e.source for e in self.edges if e.target == node_id]

    def to_text(self) -> str:
        """One numbered line per node, with the numbers of its inputs."""
        number = {n.id: i for i, n in enumerate(self.nodes, start=1)}
        labels = [_text_label(n) for n in self.nodes]
        width = max(map(len, labels), default=0)
        lines = [self.title] if self.title else []
        pad = len(str(len(self.nodes)))
        for n, label in zip(self.nodes, labels, strict=True):
            ins = self.inputs(n.id)
            line = f"{number[n.id]:>{pad}}  {label}"
            if ins:
                arrows = ", ".join(f"{number[i]}" for i in ins)
                line = f"{line.ljust(pad + 2 + width)}  <- {arrows}"
            lines.append(line)
        return "\n".join(lines)

    def to_mermaid(self) -> str:
        """A Mermaid flowchart (GitHub and JupyterLab render it in Markdown)."""
        shapes = {"actors": ('[["', '"]]'), "queue": ('[("', '")]'), "source": ('(["', '"])')}
        lines = ["flowchart TD"]
        if self.title:
            lines.insert(0, f"%% {self.title}")
        for n in self.nodes:
            left, right = shapes.get(n.kind, ('["', '"]'))
            lines.append(f"    {n.id}{left}{_mermaid_escape(_text_label(n))}{right}")
        for e in self.edges:
            lines.append(f"    {e.source} {'-.->' if e.queue else '-->'} {e.target}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """A Graphviz digraph."""
        shapes = {"actors": "box3d", "queue": "cylinder", "source": "box", "remote": "box"}
        lines = ["digraph plan {", "    rankdir=TB;", '    node [shape=box, fontname="Helvetica"];']
        if self.title:
            lines.append(f'    label="{_dot_escape(self.title)}"; labelloc=t;')
        for n in self.nodes:
            style = ', style="rounded"' if n.kind == "source" else ""
            shape = shapes.get(n.kind, "box")
            lines.append(
                f'    {n.id} [label="{_dot_escape(_text_label(n))}", shape={shape}{style}];'
            )
        for e in self.edges:
            lines.append(f"    {e.source} -> {e.target}{' [style=dashed]' if e.queue else ''};")
        lines.append("}")
        return "\n".join(lines)

    def to_png(self) -> bytes:
        """The graph drawn top to bottom with matplotlib, as PNG bytes."""
        if self._png is None:
            self._png = _draw(self)
        return self._png

    def format(self, fmt: str) -> str | bytes:
        """``text``, ``mermaid``, ``dot`` or ``png`` (bytes)."""
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
        return self.to_png() if fmt == "png" else getattr(self, f"to_{fmt}")()

    def __str__(self) -> str:
        return self.to_text()

    def _repr_png_(self) -> bytes | None:
        try:
            return self.to_png()
        except ConfigError:  # no matplotlib: the notebook shows the text
            return None


def plan_graph(plan: Any, *, title: str = "") -> PlanGraph:
    """The graph of the plan that ends in ``plan`` (a LocalIterator), without running it.

    Examples:
        >>> from flowrl.core.iter import LocalIterator
        >>> a, b = LocalIterator.from_items([1]), LocalIterator.from_items([2])
        >>> graph = plan_graph(a.union(b))
        >>> [n.label for n in graph.nodes], len(graph.edges)
        (['LocalIterator[items]', 'LocalIterator[items]', 'Union[async]'], 2)
    """
    order = walk(plan)
    ids = {id(it): f"n{i}" for i, it in enumerate(order, start=1) if not it.hidden}
    by_id = {id(it): it for it in order}

    def visible_inputs(it: Any) -> list[str]:
        out = []
        for parent in it.parents:
            out += [ids[id(parent)]] if id(parent) in ids else visible_inputs(parent)
        return out

    nodes: list[Node] = []
    edges: list[Edge] = []
    queues: dict[int, str] = {}

    def queue_node(obj: Any) -> str:
        if id(obj) not in queues:
            queues[id(obj)] = f"q{len(queues) + 1}"
            nodes.append(Node(queues[id(obj)], _queue_label(obj), "queue"))
        return queues[id(obj)]

    for key, node_id in ids.items():
        it = by_id[key]
        remote = not hasattr(it, "build")  # a ParallelIterator: its transforms run on actors
        kind = (
            ("actors" if remote else "source") if not it.parents else "remote" if remote else "step"
        )
        nodes.append(Node(node_id, it.label, kind, it.role))
        edges += [Edge(source, node_id) for source in visible_inputs(it)]
        if it.receives_from is not None:
            edges.append(Edge(queue_node(it.receives_from), node_id, queue=True))
        sends_to = getattr(it.op, "sends_to", None)
        if sends_to is not None:
            edges.append(Edge(node_id, queue_node(sends_to), queue=True))
    return PlanGraph(_topological(nodes, edges), edges, title)


def _topological(nodes: list[Node], edges: list[Edge]) -> list[Node]:
    """``nodes`` ordered so that every edge points forward (the first ready node first)."""
    waiting = {n.id: 0 for n in nodes}
    for e in edges:
        waiting[e.target] += 1
    out: list[Node] = []
    pending = list(nodes)
    while pending:
        node = next((n for n in pending if waiting[n.id] == 0), pending[0])
        pending.remove(node)
        out.append(node)
        for e in edges:
            if e.source == node.id:
                waiting[e.target] -= 1
    return out


def _queue_label(obj: Any) -> str:
    if isinstance(obj, list | tuple):
        return f"replay: {len(obj)} shards"
    return repr(obj)


def _text_label(node: Node) -> str:
    return f"{node.label}  [{node.role}]" if node.role else node.label


def _mermaid_escape(text: str) -> str:
    return text.replace('"', "#quot;")


def _dot_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def pyplot(what: str) -> Any:
    """matplotlib's pyplot, drawing to files (Agg); a ConfigError naming ``what`` needs it
    and the extra that installs it when it is missing."""
    try:
        import matplotlib
    except ImportError:
        raise ConfigError(f"{what} needs matplotlib: pip install 'flowrl-ray[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw(graph: PlanGraph) -> bytes:
    """Layers by longest path from a source, boxes spread across each layer in the order
    of their inputs, arrows between them (dashed through queues)."""
    plt = pyplot("drawing a plan")

    layer: dict[str, int] = {}
    for n in graph.nodes:  # topological: inputs are placed first
        layer[n.id] = max((layer[i] + 1 for i in graph.inputs(n.id)), default=0)
    rows: dict[int, list[str]] = {}
    x: dict[str, float] = {}
    for n in graph.nodes:
        rows.setdefault(layer[n.id], []).append(n.id)
    for depth in sorted(rows):
        members = rows[depth]
        members.sort(
            key=lambda i: sum(x[s] for s in graph.inputs(i)) / max(len(graph.inputs(i)), 1)
        )
        for k, node_id in enumerate(members):
            x[node_id] = k - (len(members) - 1) / 2
    width = max(len(m) for m in rows.values())
    fig, ax = plt.subplots(figsize=(max(4.0, 3.4 * width), 0.95 * len(rows) + 0.6))
    colours = {"actors": "#dbe9f6", "remote": "#eef4fb", "queue": "#fdebd0", "source": "#e3f4e1"}
    pos = {n.id: (x[n.id] * 3.4, -layer[n.id]) for n in graph.nodes}
    for e in graph.edges:
        (x0, y0), (x1, y1) = pos[e.source], pos[e.target]
        bend = 0.5 if layer[e.target] - layer[e.source] > 1 else 0.0  # around the layers between
        arrow = {"arrowstyle": "->", "linestyle": "--" if e.queue else "-", "lw": 1}
        arrow["connectionstyle"] = f"arc3,rad={bend}"
        ax.annotate("", xy=(x1, y1 + 0.22), xytext=(x0, y0 - 0.22), arrowprops=arrow)
    for n in graph.nodes:
        text = "\n".join(textwrap.wrap(_text_label(n), 40))
        bbox = {"boxstyle": "round,pad=0.3", "fc": colours.get(n.kind, "white"), "ec": "#555"}
        ax.text(*pos[n.id], text, ha="center", va="center", fontsize=7.5, bbox=bbox)
    ax.set_xlim(-1.9 * width - 0.5, 1.9 * width + 0.5)
    ax.set_ylim(-max(layer.values(), default=0) - 0.6, 0.6)
    ax.axis("off")
    if graph.title:
        ax.set_title(graph.title, fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()
