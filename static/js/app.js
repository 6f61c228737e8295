// The only hand-written JS: the theme toggle and drag-and-drop into the upload input.
// htmx does everything else. Loaded in <head> so the theme applies before the first paint.
(function () {
  "use strict";
  var root = document.documentElement;

  function savedTheme() {
    try {
      return localStorage.getItem("theme");
    } catch (error) {
      return null; // storage disabled: follow the system
    }
  }

  var saved = savedTheme();
  var systemDark = window.matchMedia("(prefers-color-scheme: dark)").matches;
  root.dataset.theme = saved === "light" || saved === "dark" ? saved : systemDark ? "dark" : "light";

  document.addEventListener("click", function (event) {
    if (!(event.target instanceof Element) || !event.target.closest("[data-theme-toggle]")) return;
    root.dataset.theme = root.dataset.theme === "dark" ? "light" : "dark";
    try {
      localStorage.setItem("theme", root.dataset.theme);
    } catch (error) {
      // the choice lasts for this page only
    }
  });

  // A new knowledge base's short name follows its name ("Ops handbook" → "ops-handbook")
  // until the user edits the short name itself.
  document.addEventListener("input", function (event) {
    var source = event.target;
    if (!(source instanceof HTMLInputElement)) return;
    if (source.dataset.slugFrom !== undefined) {
      source.dataset.slugEdited = source.value ? "true" : "";
      return;
    }
    var slug = document.querySelector('[data-slug-from="' + source.id + '"]');
    if (!slug || slug.dataset.slugEdited) return;
    slug.value = source.value
      .normalize("NFKD").replace(/[\u0300-\u036f]/g, "")
      .toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, 64);
  });

  // A form marked data-reset-after-request empties itself once htmx has sent it (the upload
  // form: its files are on their way). Done here because the CSP forbids hx-on's eval.
  document.addEventListener("htmx:afterRequest", function (event) {
    var form = event.target;
    if (form instanceof HTMLFormElement && form.hasAttribute("data-reset-after-request")) form.reset();
  });

  // A list marked data-follow shows its newest entry once htmx appends one, and the form
  // that asked gets the focus back: the reply is where the reader's eyes and keys are.
  document.addEventListener("htmx:afterSwap", function (event) {
    var list = event.detail.target;
    if (!(list instanceof Element) || !list.hasAttribute("data-follow")) return;
    var newest = list.lastElementChild;
    if (newest) newest.scrollIntoView({ block: "nearest" });
    var field = document.getElementById(list.getAttribute("data-follow"));
    if (field) field.focus({ preventScroll: true });
  });

  // Lists that follow their newest entry start scrolled to it.
  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll("[data-follow]").forEach(function (list) {
      list.scrollTop = list.scrollHeight;
    });
  });

  // A long document is shown a page at a time: a citation's #chunk-<id> for a passage on
  // another page asks the server for the page that holds it (?chunk=<id>).
  function openCitedPage() {
    var match = /^#chunk-(\d+)$/.exec(window.location.hash);
    if (!match || document.getElementById("chunk-" + match[1])) return;
    if (!document.querySelector("[data-document-pager]")) return;
    var params = new URLSearchParams(window.location.search);
    if (params.get("chunk") === match[1]) return;  // asked already: the chunk is gone
    params.delete("page");
    params.set("chunk", match[1]);
    window.location.replace("?" + params.toString() + window.location.hash);
  }
  document.addEventListener("DOMContentLoaded", openCitedPage);
  window.addEventListener("hashchange", openCitedPage);

  // Dropped files get their rows at once, with the upload's progress, before the server
  // has them; the server's rows replace these when the table arrives over the socket.
  // Words the page's language gives (base.html puts them on <body>); English otherwise.
  function text(name, fallback) {
    return (document.body && document.body.getAttribute("data-text-" + name)) || fallback;
  }

  function pendingRow(file) {
    var row = document.createElement("tr");
    row.setAttribute("data-upload-pending", "");
    var name = document.createElement("td");
    name.className = "doc-name";
    name.textContent = file.name;
    var status = document.createElement("td");
    status.className = "doc-status";
    status.innerHTML = '<span class="badge status status-pending"></span>' +
      '<div class="progress-line"><div class="progress" role="progressbar" aria-valuemin="0" aria-valuemax="100" aria-valuenow="0">' +
      '<span class="progress-bar"></span></div><small class="progress-text">0%</small></div>';
    status.querySelector(".status-pending").textContent = text("uploading", "Uploading");
    status.querySelector(".progress").setAttribute("aria-label", text("upload-of", "Upload of") + " " + file.name);
    row.appendChild(name);
    row.appendChild(status);
    var rest = document.createElement("td");
    rest.colSpan = 5;
    row.appendChild(rest);
    return row;
  }

  document.addEventListener("htmx:beforeRequest", function (event) {
    var form = event.target;
    var rows = document.getElementById("document-rows");
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-dropzone") || !rows) return;
    var input = form.querySelector("input[type=file]");
    if (!input || !input.files.length) return;
    rows.querySelectorAll(".empty-row, [data-upload-pending]").forEach(function (row) { row.remove(); });
    Array.prototype.forEach.call(input.files, function (file) { rows.prepend(pendingRow(file)); });
  });

  document.addEventListener("htmx:xhr:progress", function (event) {
    if (!event.detail.lengthComputable) return;
    var percent = Math.round(100 * event.detail.loaded / event.detail.total);
    document.querySelectorAll("[data-upload-pending] .progress").forEach(function (bar) {
      bar.setAttribute("aria-valuenow", String(percent));
      bar.querySelector(".progress-bar").style.width = percent + "%";
      bar.nextElementSibling.textContent = percent + "%";
    });
  });

  document.addEventListener("htmx:afterRequest", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-dropzone") || !event.detail.failed) return;
    var status = event.detail.xhr ? event.detail.xhr.status : 0;
    document.querySelectorAll("[data-upload-pending]").forEach(function (row) {
      var cell = row.querySelector(".doc-status");
      cell.innerHTML = '<span class="badge status status-failed"></span><small class="error-text"></small>';
      cell.querySelector(".status-failed").textContent = text("failed", "Failed");
      cell.querySelector(".error-text").textContent = status === 413 ? text("too-large", "The upload is too large.") :
        status ? text("refused", "The server refused the upload ({status}). Try again.").replace("{status}", status) :
        text("connection-lost", "The connection was lost. Try again.");
      row.removeAttribute("data-upload-pending");
    });
  });

  function dropzoneOf(event) {
    return event.target instanceof Element ? event.target.closest("[data-dropzone]") : null;
  }

  // Files dropped on a page with a drop zone never make the browser navigate to them.
  ["dragenter", "dragover"].forEach(function (type) {
    document.addEventListener(type, function (event) {
      if (!document.querySelector("[data-dropzone]")) return;
      event.preventDefault();
      var zone = dropzoneOf(event);
      if (zone) zone.classList.add("is-dragover");
    });
  });

  document.addEventListener("dragleave", function (event) {
    var zone = dropzoneOf(event);
    if (zone && !zone.contains(event.relatedTarget)) zone.classList.remove("is-dragover");
  });

  document.addEventListener("drop", function (event) {
    if (!document.querySelector("[data-dropzone]")) return;
    event.preventDefault();
    var zone = dropzoneOf(event);
    if (!zone || !event.dataTransfer.files.length) return;
    zone.classList.remove("is-dragover");
    var input = zone.querySelector("input[type=file]");
    input.files = event.dataTransfer.files;
    // The form's hx-trigger includes "change": htmx posts the files.
    input.dispatchEvent(new Event("change", { bubbles: true }));
  });

  // A form that destroys something asks first; without JavaScript it submits as it is.
  document.addEventListener("submit", function (event) {
    var form = event.target instanceof Element ? event.target.closest("form[data-confirm]") : null;
    if (form && !window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
  });

  // The page's language (<html lang>, "zh-hans"), not the browser's: a Chinese interface in
  // an English browser writes its dates in Chinese. Where the page names a bare language ("en")
  // the reader's own regional form of it comes first, so an en-GB reader of the English
  // interface sees 13:04 and an en-US one 01:04 PM. An unknown tag falls back to the browser's.
  function pageLocales() {
    var lang = document.documentElement.lang;
    if (!lang) return [];
    var regional = lang.indexOf("-") === -1
      ? (navigator.languages || []).filter(function (tag) {
          return tag.split("-")[0].toLowerCase() === lang.toLowerCase();
        })
      : [];
    try {
      return Intl.DateTimeFormat.supportedLocalesOf(regional.concat([lang]));
    } catch (error) {
      return [];
    }
  }

  // Times are written by the server in its zone; show them in the reader's, in the page's
  // language. A <time> keeps its ISO datetime in the title, so the exact moment is one hover away.
  function localizeTimes(root) {
    if (!root.querySelectorAll) return;
    var now = new Date();
    var locales = pageLocales();
    root.querySelectorAll("time[datetime*='T']:not([data-relative])").forEach(function (time) {
      var when = new Date(time.getAttribute("datetime"));
      if (isNaN(when)) return;
      var options = time.getAttribute("data-local") === "time"
        ? { hour: "2-digit", minute: "2-digit", second: "2-digit" }
        : { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" };
      if (options.month && when.getFullYear() !== now.getFullYear()) options.year = "numeric";
      time.textContent = when.toLocaleString(locales, options);
      time.title = time.getAttribute("datetime");
    });
  }
  // An upload's outcome says "Queued" when the server accepted the file; from then on its
  // badge shows what the file's row in the table shows, which the socket keeps current (also
  // when the final event arrived before the outcome list was swapped in).
  function followRows() {
    document.querySelectorAll("[data-outcome-document]").forEach(function (badge) {
      var row = document.getElementById("document-" + badge.getAttribute("data-outcome-document"));
      var status = row && row.querySelector(".doc-status .badge");
      if (!status) return;
      badge.textContent = status.textContent.trim();
      badge.setAttribute("data-status", row.getAttribute("data-status"));
    });
  }
  ["htmx:load", "htmx:oobAfterSwap", "htmx:wsAfterMessage"].forEach(function (type) {
    document.addEventListener(type, followRows);
  });

  // "5 minutes ago" written by the server is true only when the page is rendered: these
  // elements are rewritten from their datetime, in the page's language, every half minute.
  var RELATIVE_UNITS = [["year", 31536000], ["month", 2592000], ["week", 604800], ["day", 86400],
                        ["hour", 3600], ["minute", 60]];
  function relativeTimes(root) {
    if (!root.querySelectorAll || !window.Intl || !Intl.RelativeTimeFormat) return;
    var format = new Intl.RelativeTimeFormat(pageLocales(), { numeric: "auto" });
    root.querySelectorAll("time[data-relative]").forEach(function (time) {
      var when = new Date(time.getAttribute("datetime"));
      if (isNaN(when)) return;
      var seconds = Math.round((when - new Date()) / 1000);
      var unit = RELATIVE_UNITS.find(function (pair) { return Math.abs(seconds) >= pair[1]; });
      time.textContent = unit ? format.format(Math.round(seconds / unit[1]), unit[0]) : format.format(0, "minute");
      time.title = when.toLocaleString(pageLocales());
    });
  }
  // htmx fires htmx:load for the page, then for every fragment it swaps in.
  document.addEventListener("htmx:load", function (event) {
    localizeTimes(event.detail.elt);
    relativeTimes(event.detail.elt);
  });
  window.setInterval(function () { relativeTimes(document); }, 30000);
})();
