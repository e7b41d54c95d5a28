// memrev viewer: navigation and live updates. Pages read fine without it.
"use strict";

function onKey(handler) {
  document.addEventListener("keydown", (event) => {
    const t = event.target;
    if (t && (t.tagName === "INPUT" && t.type !== "radio" || t.tagName === "TEXTAREA" || t.tagName === "SELECT")) return;
    if (event.altKey || event.ctrlKey || event.metaKey) return;
    handler(event);
  });
}

// Diff of one path: left/right arrows step to the older/newer change.
function diffKeys() {
  const older = document.getElementById("older");
  const newer = document.getElementById("newer");
  if (!older && !newer) return;
  onKey((event) => {
    if (event.key === "ArrowLeft" && older) { window.location.href = older.href; event.preventDefault(); }
    if (event.key === "ArrowRight" && newer) { window.location.href = newer.href; event.preventDefault(); }
  });
}

// Timeline: up/down move between versions (selecting the pair "this version
// against the one before it"), Enter or the arrows left/right open the comparison.
function timelineKeys() {
  const rows = Array.from(document.querySelectorAll("table.timeline tbody tr"));
  if (!rows.length) return;
  let at = 0;
  const select = (i) => {
    at = Math.max(0, Math.min(rows.length - 1, i));
    rows.forEach((r, j) => r.classList.toggle("current", j === at));
    const b = rows[at].querySelector("input[name=b]");
    const a = rows[Math.min(at + 1, rows.length - 1)].querySelector("input[name=a]");
    if (b) b.checked = true;
    if (a) a.checked = true;
    rows[at].scrollIntoView({ block: "nearest" });
  };
  select(0);
  onKey((event) => {
    if (event.key === "ArrowDown") { select(at + 1); event.preventDefault(); }
    else if (event.key === "ArrowUp") { select(at - 1); event.preventDefault(); }
    else if (event.key === "Enter" || event.key === "ArrowRight") {
      const step = rows[at].querySelector("a.step");
      if (step) { window.location.href = step.href; event.preventDefault(); }
    }
  });
}

// Live: the server sends an event when the branch moves; offer to refresh.
function live() {
  if (!window.EventSource) return;
  const banner = document.getElementById("live");
  const source = new EventSource("/events");
  source.addEventListener("open", () => { document.body.dataset.live = "connected"; });
  source.addEventListener("commit", () => { banner.hidden = false; });
  document.getElementById("live-refresh").addEventListener("click", (event) => {
    event.preventDefault();
    window.location.reload();
  });
  window.addEventListener("beforeunload", () => source.close());
}

document.addEventListener("DOMContentLoaded", () => {
  diffKeys();
  timelineKeys();
  live();
});

// Copy buttons beside shortened ids (hidden without JS: the full value is on hover).
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("button.copy").forEach((button) => {
    button.hidden = false;
    button.addEventListener("click", () => {
      if (navigator.clipboard) navigator.clipboard.writeText(button.dataset.copy || "");
    });
  });
});

// A line permalink (#L12) on a rendered Markdown page whose blocks do not start at that line:
// open the source view at the same line (without JS the source link does it).
document.addEventListener("DOMContentLoaded", () => {
  const hash = window.location.hash;
  const source = document.querySelector("a.source-view");
  if (!source || !/^#L\d+$/.test(hash) || document.getElementById(hash.slice(1))) return;
  window.location.replace(source.href + hash);
});
