// The chat page's own JS: keep the answer in view, copy, open a citation's evidence,
// send on Enter. htmx and its websocket extension do the rest.
(function () {
  "use strict";

  var STICK_PX = 80; // closer than this to the bottom: follow the streamed answer
  var RECONNECT_FIRST_MS = 250;
  var RECONNECT_CAP_MS = 2000; // a restarted server is found again within this of answering

  // Capped exponential backoff with jitter (htmx's default grows to a minute); the count
  // starts again once a socket opens.
  function reconnectDelay(retryCount) {
    var ceiling = Math.min(RECONNECT_CAP_MS, RECONNECT_FIRST_MS * Math.pow(2, retryCount));
    return ceiling / 2 + Math.random() * ceiling / 2;
  }
  if (window.htmx) window.htmx.config.wsReconnectDelay = reconnectDelay;

  function chat() {
    return document.querySelector("[data-chat]");
  }

  function messages() {
    return document.querySelector("[data-messages]");
  }

  function nearBottom(box) {
    return box.scrollHeight - box.scrollTop - box.clientHeight < STICK_PX;
  }

  function scrollToEnd(box) {
    box.scrollTop = box.scrollHeight;
  }

  // The bottom is measured before a message lands, so a reader who scrolled up stays put.
  var following = true;
  document.addEventListener("htmx:wsBeforeMessage", function () {
    var box = messages();
    following = box ? nearBottom(box) : false;
  });

  document.addEventListener("htmx:wsAfterMessage", function () {
    var box = messages();
    if (box && following) followAnswer(box);
    keepNewestEvidence();
    showSessionInAddressBar();
  });

  // Follow the answer being written, but never past its first line: a reader (on a phone,
  // a few lines at a time) reads it from the start.
  function followAnswer(box) {
    var answers = box.querySelectorAll(".msg-assistant");
    var latest = answers[answers.length - 1];
    if (!latest) return scrollToEnd(box);
    var question = latest.previousElementSibling;
    var start = question && question.classList.contains("msg-user") ? question : latest;
    var top = start.getBoundingClientRect().top - box.getBoundingClientRect().top + box.scrollTop - 8;
    box.scrollTop = Math.min(box.scrollHeight, Math.max(top, 0), box.scrollHeight - box.clientHeight);
  }

  function keepNewestEvidence() {
    var active = document.querySelectorAll(".evidence-list.is-active");
    for (var i = 0; i < active.length - 1; i++) active[i].classList.remove("is-active");
  }

  // A new chat gets its session id from the first event: make the URL the session's own.
  function showSessionInAddressBar() {
    var field = document.getElementById("session-id");
    if (field && field.value && window.location.pathname === "/") {
      history.replaceState(null, "", "/c/" + encodeURIComponent(field.value) + "/");
    }
  }

  function openEvidence(link) {
    var key = link.getAttribute("data-evidence");
    var item = document.getElementById("ev-" + key + "-" + link.getAttribute("data-cite"));
    if (!item) return false;
    document.querySelectorAll(".evidence-list").forEach(function (list) {
      list.classList.toggle("is-active", list === item.parentElement);
    });
    document.querySelectorAll(".evidence-item.is-highlighted").forEach(function (other) {
      other.classList.remove("is-highlighted");
    });
    item.classList.add("is-highlighted");
    var root = chat();
    if (root) root.classList.add("evidence-open");
    item.scrollIntoView({ block: "nearest", behavior: "smooth" });
    return true;
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    var scratch = document.createElement("textarea");
    scratch.value = text;
    document.body.appendChild(scratch);
    scratch.select();
    document.execCommand("copy");
    scratch.remove();
    return Promise.resolve();
  }

  document.addEventListener("click", function (event) {
    if (!(event.target instanceof Element)) return;
    var cite = event.target.closest("a.cite[data-cite]");
    if (cite && openEvidence(cite)) {
      event.preventDefault();
      return;
    }
    if (event.target.closest("[data-evidence-close]")) {
      var root = chat();
      if (root) root.classList.remove("evidence-open");
      return;
    }
    var copy = event.target.closest("[data-copy]");
    if (copy) {
      var source = document.querySelector(copy.getAttribute("data-copy"));
      if (!source) return;
      var label = copy.textContent;
      copyText(source.innerText.trim()).then(function () {
        copy.textContent = copy.getAttribute("data-copied") || "Copied ✓";
        setTimeout(function () { copy.textContent = label; }, 1500);
      });
    }
  });

  // Enter sends, Shift+Enter starts a new line; an IME composing Chinese keeps its Enter.
  document.addEventListener("keydown", function (event) {
    var box = event.target;
    if (!(box instanceof HTMLTextAreaElement) || !box.form || !box.form.hasAttribute("data-chat-form")) return;
    if (event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    event.preventDefault();
    // One message waits for the connection at a time.
    if (box.value.trim() && !box.form.hasAttribute("data-queued")) box.form.requestSubmit();
  });

  document.addEventListener("htmx:wsAfterSend", function (event) {
    var form = event.target instanceof Element ? event.target.closest("[data-chat-form]") : null;
    if (form) form.querySelector("textarea").value = "";
  });

  // A lost connection is said. A message sent meanwhile waits in htmx's queue and goes once
  // the socket is back; until then it stays in the box, read-only, and Send waits for it.
  var connected = false;

  function setConnected(isConnected) {
    connected = isConnected;
    var note = document.querySelector("[data-connection]");
    if (note) note.hidden = connected;
  }

  function setQueued(form, queued) {
    var note = document.querySelector("[data-connection]");
    if (note && queued) {
      note.setAttribute("data-lost-text", note.textContent);
      note.textContent = note.getAttribute("data-queued-text");
    } else if (note && note.hasAttribute("data-lost-text")) {
      note.textContent = note.getAttribute("data-lost-text");
    }
    form.toggleAttribute("data-queued", queued);
    form.querySelector("textarea").readOnly = queued;
    form.querySelector("[data-send]").disabled = queued;
  }

  document.addEventListener("htmx:wsConfigSend", function (event) {
    var form = event.target instanceof Element ? event.target.closest("[data-chat-form]") : null;
    if (form && !connected) setQueued(form, true);
  });
  document.addEventListener("htmx:wsAfterSend", function (event) {
    var form = event.target instanceof Element ? event.target.closest("[data-chat-form]") : null;
    if (form && form.hasAttribute("data-queued")) setQueued(form, false);
  });
  document.addEventListener("htmx:wsClose", function () { setConnected(false); });
  document.addEventListener("htmx:wsError", function () { setConnected(false); });
  document.addEventListener("htmx:wsOpen", function () { setConnected(true); });

  // Stop shows while an answer is being written: a streaming message that has not ended,
  // been stopped, failed or been refused.
  document.addEventListener("htmx:wsAfterMessage", function () {
    var stop = document.querySelector("[data-chat-stop]");
    if (!stop) return;
    var writing = Array.prototype.some.call(document.querySelectorAll(".msg-assistant.is-streaming"), function (msg) {
      return !msg.querySelector(".msg-stopped, .msg-error, .msg-refused");
    });
    stop.hidden = !writing;
  });

  // The Clarifier's choices take the keyboard's focus when they arrive: Tab moves between
  // them, Enter or Space picks one.
  document.addEventListener("htmx:wsAfterMessage", function () {
    var fresh = document.querySelector("[data-clarify-new]");
    if (!fresh) return;
    fresh.removeAttribute("data-clarify-new");
    var first = fresh.querySelector("[data-clarify-choice]");
    if (first) first.focus({ preventScroll: true });
  });

  // Edit puts an earlier question back in the box, to change and send again.
  document.addEventListener("click", function (event) {
    var edit = event.target instanceof Element ? event.target.closest("[data-edit-message]") : null;
    if (!edit) return;
    var box = document.getElementById("chat-message");
    var bubble = edit.closest(".msg-user").querySelector(".bubble");
    if (!box || !bubble) return;
    box.value = bubble.innerText.trim();
    box.focus();
    box.setSelectionRange(box.value.length, box.value.length);
  });

  // On a phone the sessions and the answer's options are a sheet under the header.
  function setSheetOpen(open) {
    var root = chat();
    var toggle = document.querySelector("[data-chat-sheet-toggle]");
    if (!root || !toggle) return;
    root.classList.toggle("sheet-open", open);
    toggle.setAttribute("aria-expanded", open ? "true" : "false");
  }

  document.addEventListener("click", function (event) {
    if (!(event.target instanceof Element)) return;
    if (event.target.closest("[data-chat-sheet-toggle]")) {
      var root = chat();
      setSheetOpen(!(root && root.classList.contains("sheet-open")));
    } else if (!event.target.closest("[data-chat-sheet]")) {
      setSheetOpen(false);
    }
  });

  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") setSheetOpen(false);
  });

  // The offline note: a tap opens its one line on a phone; ✕ puts it away in this browser.
  document.addEventListener("click", function (event) {
    if (!(event.target instanceof Element)) return;
    var text = event.target.closest("[data-offline-text]");
    if (text && !event.target.closest("a")) text.classList.toggle("is-open");
    var dismiss = event.target.closest("[data-offline-dismiss]");
    if (!dismiss) return;
    dismiss.closest("[data-offline-note]").hidden = true;
    try { localStorage.setItem("offline-note", "dismissed"); } catch (e) { /* private mode */ }
  });

  // The stage panel opens and closes on click, and stays as the reader left it.
  function setPipelineOpen(panel, open) {
    panel.classList.toggle("is-compact", !open);
    panel.querySelector("[data-pipeline-toggle]").setAttribute("aria-expanded", open ? "true" : "false");
  }

  document.addEventListener("click", function (event) {
    var toggle = event.target instanceof Element ? event.target.closest("[data-pipeline-toggle]") : null;
    if (!toggle) return;
    var panel = toggle.closest("[data-pipeline-panel]");
    var open = panel.classList.contains("is-compact");
    setPipelineOpen(panel, open);
    try { localStorage.setItem("pipeline-open", open ? "1" : "0"); } catch (e) { /* private mode */ }
  });

  document.addEventListener("DOMContentLoaded", function () {
    var box = messages();
    if (box) scrollToEnd(box);
    var panel = document.querySelector("[data-pipeline-panel]");
    var remembered = null;
    try { remembered = localStorage.getItem("pipeline-open"); } catch (e) { /* private mode */ }
    if (panel && remembered === "1") setPipelineOpen(panel, true);
    var note = document.querySelector("[data-offline-note]");
    try { if (note && localStorage.getItem("offline-note") === "dismissed") note.hidden = true; } catch (e) { /* private mode */ }
  });
})();
