// recursa web: the usage pane: a subtree's tokens and cost, each child's share, per model.
"use strict";

const usageTicket = tickets();

async function loadUsage() {
  const id = state.selected;
  if (!id) return;
  const current = usageTicket();
  const node = await act(() => op("usage", { session: id }));
  if (!node || !current() || id !== state.selected) return;
  $("#usage-title").textContent = `usage of ${label(state.sessions.get(id))}'s subtree: ${tokens(node.total.input_tokens + node.total.output_tokens)} tokens, ${cost(node.total)}`;
  const body = el("tbody");
  const weight = (u) => u.cost || u.input_tokens + u.output_tokens;
  const walk = (n, level, parentTotal) => {
    const share = parentTotal ? weight(n.total) / parentTotal : 1;
    const info = state.sessions.get(n.id);
    body.append(el("tr", { dataset: { id: n.id } },
      el("td", { title: n.id }, el("span", { class: "indent", text: level ? "  ".repeat(level - 1) + "└ " : "" }), n.name || n.id),
      el("td", { class: "dim", text: info ? info.model : "" }),
      el("td", { class: "num", text: n.own.calls }),
      el("td", { class: "num", text: `${tokens(n.own.input_tokens)} / ${tokens(n.own.output_tokens)}` }),
      el("td", { class: "num", text: cost(n.own) }),
      el("td", { class: "num", text: tokens(n.total.input_tokens + n.total.output_tokens) }),
      el("td", { class: "num", text: cost(n.total) }),
      el("td", { class: "share" }, level ? shareBar(share) : el("span", { class: "dim", title: "the subtree shown", text: "—" }))));
    const total = weight(n.total);
    for (const child of n.children) walk(child, level + 1, total);
  };
  walk(node, 0, 0);
  $("#usage tbody").replaceWith(body);
  $("#usage-models tbody").replaceWith(byModel(node));
}

// The subtree's own usage summed per model (each session runs one model).
function byModel(node) {
  const models = new Map();
  const add = (n) => {
    const info = state.sessions.get(n.id);
    const model = info ? info.model : "?";
    const sum = models.get(model) || { sessions: 0, calls: 0, input_tokens: 0, output_tokens: 0, cost: 0, unknown_cost_calls: 0 };
    sum.sessions += 1;
    for (const key of ["calls", "input_tokens", "output_tokens", "cost", "unknown_cost_calls"]) sum[key] += n.own[key];
    models.set(model, sum);
    n.children.forEach(add);
  };
  add(node);
  const body = el("tbody");
  const all = node.total.cost || node.total.input_tokens + node.total.output_tokens;
  for (const [model, sum] of [...models.entries()].sort((a, b) => b[1].input_tokens - a[1].input_tokens)) {
    const share = all ? (node.total.cost ? sum.cost : sum.input_tokens + sum.output_tokens) / all : 0;
    body.append(el("tr", {},
      el("td", { text: model }), el("td", { class: "num", text: sum.sessions }), el("td", { class: "num", text: sum.calls }),
      el("td", { class: "num", text: `${tokens(sum.input_tokens)} / ${tokens(sum.output_tokens)}` }),
      el("td", { class: "num", text: cost(sum) }), el("td", { class: "share" }, shareBar(share))));
  }
  return body;
}

function shareBar(share) {
  const bar = el("span", { class: "bar-fill" });
  bar.style.width = `${Math.round(share * 100)}%`;
  return el("span", { class: "share-cell" }, el("span", { class: "bar-track" }, bar), ` ${(share * 100).toFixed(0)}%`);
}
