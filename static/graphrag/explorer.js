// The graph explorer's canvas. force-graph draws and animates it; this file loads the nodes in
// batches from data.json, colours them by type, highlights a node's neighbourhood on hover and
// on selection, and asks htmx for the detail panel of a clicked node. Entity and relation names
// are user data: they reach the page as canvas text or textContent, never as HTML.
(function () {
  "use strict";

  var FALLBACK_COLOUR = "rgb(140, 140, 140)";
  var FADED_ALPHA = 0.12; // everything outside a highlighted neighbourhood
  var LABEL_ZOOM = 2.2; // from this zoom on every node is labelled
  var LABELLED_TOP = 25; // below it, only the most mentioned nodes are
  var ARROW_ZOOM = 1.2; // arrows cost a path each: only once they can be seen
  var FIT_MAX_ZOOM = 3; // a graph of a few nodes is fitted no closer than this

  var root, canvasBox, graph, statusLine, moreButton;
  var nodes = new Map(); // id -> node object (force-graph adds x, y, vx, vy)
  var links = [];
  var linkKeys = new Set();
  var adjacency = new Map(); // id -> Set of neighbour ids
  var nextOffset = 0;
  var total = 0;
  var generation = 0; // a filter change makes older answers stale
  var loading = false;
  var filters = { types: null, relations: null, cooccurrence: true }; // null: no filter
  var paint = { types: {} }; // colour strings, built once per theme: accessors run every frame
  var hovered = null;
  var selected = null;
  var dismissed = false; // the background was clicked: the panel stays, its node is not selected
  var highlight = null; // Set of ids, or null when nothing is highlighted
  var searchHits = null;
  var labelled = new Set(); // ids of the most mentioned nodes, labelled at any zoom
  var zoomLevel = 1;
  var fitted = false;
  var centrePending = false;
  var isMoving = false;

  function rgbOf(cssColour) {
    var parts = (cssColour || "").match(/[\d.]+/g);
    return parts && parts.length >= 3 ? parts.slice(0, 3).map(Number) : null;
  }

  function rgba(rgb, alpha) {
    return "rgba(" + rgb[0] + ", " + rgb[1] + ", " + rgb[2] + ", " + alpha + ")";
  }

  // The colours live in explorer.css and app.css; read them as the browser resolved them, so
  // the canvas follows the theme.
  function readColours() {
    var types = {};
    root.querySelectorAll("[data-type-colour]").forEach(function (swatch) {
      var rgb = rgbOf(getComputedStyle(swatch).backgroundColor);
      if (rgb) types[swatch.getAttribute("data-type-colour")] = { lit: rgba(rgb, 1), faded: rgba(rgb, FADED_ALPHA) };
    });
    var text = rgbOf(getComputedStyle(canvasBox).color) || [0, 0, 0];
    var muted = rgbOf(getComputedStyle(statusLine).color) || [128, 128, 128];
    var probe = document.createElement("span");
    probe.style.color = "var(--accent)";
    root.appendChild(probe);
    var accent = rgbOf(getComputedStyle(probe).color) || [59, 91, 219];
    probe.remove();
    paint = {
      types: types,
      explicit: rgba(text, 0.55), explicitFaded: rgba(text, 0.06),
      cooccurrence: rgba(muted, 0.18), cooccurrenceFaded: rgba(muted, 0.03),
      focusExplicit: rgba(accent, 0.9), focusCooccurrence: rgba(accent, 0.55),
      label: rgba(text, 0.9), labelFaded: rgba(text, 0.3),
      selectedRing: rgba(accent, 1), hoveredRing: rgba(accent, 0.6),
    };
  }

  function endId(end) {
    return typeof end === "object" && end !== null ? end.id : end;
  }

  function isExplicit(link) {
    return link.weight >= 1;
  }

  function isLit(node) {
    return !highlight || highlight.has(node.id);
  }

  function touchesFocus(link) {
    var focus = hovered || selected;
    return !!focus && (endId(link.source) === focus.id || endId(link.target) === focus.id);
  }

  function nodeColour(node) {
    var colour = paint.types[node.type];
    if (!colour) return FALLBACK_COLOUR;
    return isLit(node) ? colour.lit : colour.faded;
  }

  function linkColour(link) {
    if (touchesFocus(link)) return isExplicit(link) ? paint.focusExplicit : paint.focusCooccurrence;
    var faded = highlight && !(highlight.has(endId(link.source)) && highlight.has(endId(link.target)));
    if (isExplicit(link)) return faded ? paint.explicitFaded : paint.explicit;
    return faded ? paint.cooccurrenceFaded : paint.cooccurrence;
  }

  function linkWidth(link) {
    var width = isExplicit(link) ? 1.6 : 0.4;
    return touchesFocus(link) ? width * 1.8 : width;
  }

  function nodeSize(node) {
    return 1 + Math.sqrt(node.mentions || 0);
  }

  function textTip(parts) {
    var tip = document.createElement("span");
    parts.forEach(function (part) {
      var piece = document.createElement("span");
      piece.textContent = part.text;
      if (part.className) piece.className = part.className;
      tip.appendChild(piece);
    });
    return tip;
  }

  // The page's words in its language (data-text-* on the root), with {name} filled in.
  function say(name, fallback, values) {
    var text = root.getAttribute("data-text-" + name) || fallback;
    Object.keys(values || {}).forEach(function (key) { text = text.split("{" + key + "}").join(values[key]); });
    return text;
  }

  // force-graph puts a string label in with innerHTML; an element it appends as it is.
  function nodeTip(node) {
    return textTip([
      { text: node.name },
      { text: " · " + node.type + " · " + say("mentions", "{n} mentions", { n: node.mentions }), className: "graph-tip-type" },
    ]);
  }

  function linkTip(link) {
    var source = nodes.get(endId(link.source));
    var target = nodes.get(endId(link.target));
    return textTip([{ text: (source ? source.name : "?") + " — " + link.relation + " → " + (target ? target.name : "?") }]);
  }

  function drawLabel(node, ctx, scale) {
    var wanted = node === hovered || node === selected || (searchHits && searchHits.has(node.id));
    if (!wanted && (!isLit(node) || (scale < LABEL_ZOOM && !labelled.has(node.id)))) return;
    var size = 11 / scale;
    var radius = Math.sqrt(nodeSize(node)) * graph.nodeRelSize();
    ctx.font = (wanted ? "600 " : "") + size + "px system-ui, sans-serif";
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    ctx.fillStyle = isLit(node) ? paint.label : paint.labelFaded;
    ctx.fillText(node.name, node.x, node.y + radius + 1.5 / scale);
  }

  function drawRings(ctx, scale) {
    [selected, hovered].forEach(function (node, index) {
      if (!node || node.x === undefined) return;
      var radius = Math.sqrt(nodeSize(node)) * graph.nodeRelSize();
      ctx.beginPath();
      ctx.arc(node.x, node.y, radius + 3 / scale, 0, 2 * Math.PI);
      ctx.strokeStyle = index === 0 ? paint.selectedRing : paint.hoveredRing;
      ctx.lineWidth = 2 / scale;
      ctx.stroke();
    });
  }

  // With autoPauseRedraw the canvas repaints only on its own events; a change made from
  // outside (search, the detail panel, the theme) asks for one by resetting an accessor.
  function repaint() {
    graph.nodeColor(graph.nodeColor());
  }

  function neighbourhood(node) {
    var lit = new Set([node.id]);
    (adjacency.get(node.id) || new Set()).forEach(function (id) { lit.add(id); });
    return lit;
  }

  function updateHighlight() {
    var focus = hovered || selected;
    highlight = focus ? neighbourhood(focus) : searchHits && searchHits.size ? searchHits : null;
    repaint();
  }

  function addLink(link) {
    var key = link.source + ">" + link.target + ">" + link.relation;
    if (linkKeys.has(key) || !nodes.has(link.source) || !nodes.has(link.target)) return;
    linkKeys.add(key);
    links.push(link);
    [[link.source, link.target], [link.target, link.source]].forEach(function (pair) {
      if (!adjacency.has(pair[0])) adjacency.set(pair[0], new Set());
      adjacency.get(pair[0]).add(pair[1]);
    });
  }

  function addNode(node, near) {
    if (nodes.has(node.id)) return nodes.get(node.id);
    if (near && near.x !== undefined) {
      node.x = near.x + (Math.random() - 0.5) * 20;
      node.y = near.y + (Math.random() - 0.5) * 20;
    }
    nodes.set(node.id, node);
    return node;
  }

  function refreshData() {
    // A set, not a mention floor: in a long tail of equal counts a floor would label them all.
    var ranked = Array.from(nodes.values());
    ranked.sort(function (a, b) { return b.mentions - a.mentions; });
    labelled = new Set(ranked.slice(0, LABELLED_TOP).map(function (node) { return node.id; }));
    graph.graphData({ nodes: Array.from(nodes.values()), links: links });
    markMoving(true); // new data reheats the layout
    root.setAttribute("data-loaded", String(nodes.size));
  }

  function reset() {
    nodes = new Map();
    links = [];
    linkKeys = new Set();
    adjacency = new Map();
    nextOffset = 0;
    total = 0;
    hovered = null;
    selected = null; // syncSelection puts it back once the new batch is in
    fitted = false;
    refreshData();
    // A new layout starts around the origin: look there until it settles and gets fitted.
    graph.centerAt(0, 0).zoom(1);
  }

  function dataUrl() {
    var params = new URLSearchParams();
    params.set("offset", String(nextOffset));
    params.set("limit", root.getAttribute("data-batch"));
    (filters.types || []).forEach(function (type) { params.append("type", type); });
    (filters.relations || []).forEach(function (name) { params.append("relation", name); });
    if (!filters.cooccurrence) params.set("links", "explicit");
    params.set("order", "community"); // the biggest communities first, whole
    return root.getAttribute("data-url") + "?" + params.toString();
  }

  function showStatus() {
    var batch = Number(root.getAttribute("data-batch"));
    statusLine.textContent = total
      ? say("showing", "Showing {shown} of {total} entities · {links} links", {
        shown: nextOffset.toLocaleString(), total: total.toLocaleString(), links: links.length.toLocaleString(),
      })
      : say("no-match", "No entity matches these filters.");
    var left = total - nextOffset;
    moreButton.hidden = !(nextOffset && left > 0);
    moreButton.textContent = say("show-more", "Show {n} more", { n: Math.min(batch, left).toLocaleString() });
  }

  function load() {
    var asked = generation;
    if ((filters.types && !filters.types.length) || (filters.relations && !filters.relations.length)) {
      statusLine.textContent = say("choose", "Choose at least one type and one relation.");
      moreButton.hidden = true;
      return;
    }
    loading = true;
    moreButton.disabled = true;
    statusLine.textContent = nodes.size ? say("loading-more", "Loading more…") : say("loading", "Loading the graph…");
    fetch(dataUrl(), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.json();
      })
      .then(function (data) {
        if (asked !== generation) return;
        data.nodes.forEach(function (node) { addNode(node); });
        data.links.forEach(addLink);
        total = data.total;
        nextOffset = data.next_offset || total;
        refreshData();
        showStatus();
        matchSearch();
        syncSelection();
      })
      .catch(function (error) {
        if (asked === generation) statusLine.textContent = say("load-failed", "Could not load the graph ({error}). Reload to try again.", { error: error.message });
      })
      .finally(function () {
        if (asked !== generation) return;
        loading = false;
        moreButton.disabled = false;
      });
  }

  function checkedValues(form, name) {
    var boxes = Array.from(form.querySelectorAll("input[name=" + name + "]"));
    var checked = boxes.filter(function (box) { return box.checked; });
    // Everything ticked means no filter, which also keeps what the list does not name.
    return checked.length === boxes.length ? null : checked.map(function (box) { return box.value; });
  }

  function hasCooccurrence() {
    var toggle = root.querySelector("[data-graph-cooccurrence]");
    return !toggle || toggle.checked;
  }

  function applyFilters(form) {
    filters = {
      types: checkedValues(form, "type"), relations: checkedValues(form, "relation"), cooccurrence: hasCooccurrence(),
    };
    generation += 1;
    reset();
    load();
  }

  function matchSearch() {
    var input = document.getElementById("graph-q");
    var term = input ? input.value.trim().toLowerCase() : "";
    searchHits = null;
    if (term) {
      searchHits = new Set();
      nodes.forEach(function (node) {
        if (node.name.toLowerCase().indexOf(term) !== -1) searchHits.add(node.id);
      });
    }
    updateHighlight();
  }

  function entityUrl(id) {
    return root.getAttribute("data-entity-url").replace(/0\/$/, id + "/");
  }

  function openNode(node) {
    htmx.ajax("GET", entityUrl(node.id), { target: "#graph-detail", swap: "outerHTML" });
  }

  // The detail panel names the selected entity; one that is not on the canvas yet (found by
  // search, or a neighbour outside the loaded batches) joins it with its links.
  function syncSelection() {
    var detail = document.getElementById("graph-detail");
    var id = detail ? Number(detail.getAttribute("data-entity-id")) : 0;
    if (!id || dismissed) return;
    var isNew = !selected || selected.id !== id;
    selected = nodes.get(id) || addSelected(detail, id);
    root.setAttribute("data-selected", String(id));
    updateHighlight();
    if (isNew) centreOnSelected();
  }

  function centreOnSelected() {
    // The layout may still be moving the node (or has not placed one that just joined):
    // centre again once it stands still.
    var isPlaced = !!selected && selected.x !== undefined;
    centrePending = isMoving || !isPlaced;
    if (!isPlaced) return;
    graph.centerAt(selected.x, selected.y, 600);
    if (zoomLevel < 1.5) graph.zoom(2.5, 600);
  }

  function markMoving(moving) {
    if (moving === isMoving) return;
    isMoving = moving;
    root.setAttribute("data-layout", moving ? "moving" : "still");
  }

  function addSelected(detail, id) {
    var near = null;
    var joining = [];
    detail.querySelectorAll("[data-neighbour-id]").forEach(function (anchor) {
      var other = Number(anchor.getAttribute("data-neighbour-id"));
      if (!nodes.has(other)) return;
      near = near || nodes.get(other);
      var outgoing = anchor.getAttribute("data-direction") === "out";
      joining.push({
        source: outgoing ? id : other,
        target: outgoing ? other : id,
        relation: anchor.getAttribute("data-relation"),
        weight: Number(anchor.getAttribute("data-weight")),
      });
    });
    var node = addNode({
      id: id,
      name: detail.getAttribute("data-entity-name"),
      type: detail.getAttribute("data-entity-type"),
      mentions: Number(detail.getAttribute("data-entity-mentions")) || 0,
      community: null,
    }, near);
    joining.forEach(addLink);
    refreshData();
    return node;
  }

  // Fit the graph to the canvas, but not so close that three nodes fill it.
  function fitView() {
    graph.zoomToFit(400, 40);
    setTimeout(function () {
      if (graph.zoom() > FIT_MAX_ZOOM) graph.zoom(FIT_MAX_ZOOM, 300);
    }, 420);
  }

  function sizeToBox() {
    graph.width(canvasBox.clientWidth).height(canvasBox.clientHeight);
  }

  function build() {
    graph = new ForceGraph(canvasBox)
      .nodeId("id")
      .nodeRelSize(3)
      .nodeVal(nodeSize)
      .nodeColor(nodeColour)
      .nodeLabel(nodeTip)
      .nodeCanvasObjectMode(function () { return "after"; })
      .nodeCanvasObject(drawLabel)
      .linkColor(linkColour)
      .linkWidth(linkWidth)
      .linkLabel(linkTip)
      .linkDirectionalArrowLength(function (link) { return isExplicit(link) && zoomLevel >= ARROW_ZOOM ? 3 : 0; })
      .linkDirectionalArrowRelPos(0.9)
      .linkDirectionalArrowColor(linkColour)
      .onRenderFramePost(drawRings)
      .onNodeHover(function (node) {
        hovered = node || null;
        canvasBox.style.cursor = node ? "pointer" : "";
        updateHighlight();
      })
      .onNodeClick(openNode)
      .onBackgroundClick(function () {
        selected = null;
        dismissed = true;
        root.removeAttribute("data-selected");
        updateHighlight();
      })
      .onZoom(function (transform) { zoomLevel = transform.k; })
      .onEngineTick(function () { markMoving(true); })
      .onEngineStop(function () {
        markMoving(false);
        if (centrePending) {
          centreOnSelected();
        } else if (!fitted && nodes.size) {
          fitView();
        }
        fitted = true;
      })
      .d3AlphaDecay(0.035)
      .cooldownTime(12000);
    sizeToBox();
    new ResizeObserver(sizeToBox).observe(canvasBox);
  }

  function init() {
    root = document.querySelector("[data-graph]");
    if (!root || typeof ForceGraph !== "function") return;
    canvasBox = root.querySelector("[data-graph-canvas]");
    statusLine = root.querySelector("[data-graph-status]");
    moreButton = root.querySelector("[data-graph-more]");
    readColours();
    build();

    moreButton.addEventListener("click", function () {
      if (!loading) load();
    });
    root.querySelector("[data-graph-fit]").addEventListener("click", fitView);
    var filterForm = root.querySelector("[data-graph-filters]");
    filterForm.addEventListener("change", function () { applyFilters(filterForm); });
    filterForm.addEventListener("submit", function (event) { event.preventDefault(); });
    var cooccurrence = root.querySelector("[data-graph-cooccurrence]");
    if (cooccurrence) cooccurrence.addEventListener("change", function () { applyFilters(filterForm); });
    filters.cooccurrence = hasCooccurrence();
    document.getElementById("graph-q").addEventListener("input", matchSearch);
    // However the panel was asked for (a search result, a neighbour, a click on the canvas),
    // the entity it shows is the selection.
    document.addEventListener("htmx:afterSettle", function (event) {
      if (!(event.target instanceof Element) || event.target.id !== "graph-detail") return;
      dismissed = false;
      syncSelection();
    });
    new MutationObserver(function () {
      readColours();
      repaint();
    }).observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
    load();
  }

  document.addEventListener("DOMContentLoaded", init);
})();
