// simia viewer: keyboard navigation and live updates of active episodes. No dependencies, no network but this server.
"use strict";
(function () {
  const body = document.body;
  const kind = body.dataset.page;

  function rowLinks() {
    return Array.from(document.querySelectorAll("tbody a.row-link"));
  }

  function moveFocus(delta) {
    const links = rowLinks();
    if (!links.length) return;
    let i = links.indexOf(document.activeElement);
    i = i < 0 ? (delta > 0 ? 0 : links.length - 1) : Math.max(0, Math.min(links.length - 1, i + delta));
    links[i].focus();
    links[i].scrollIntoView({ block: "nearest" });
  }

  function follow(rel) {
    const link = document.querySelector(`#detail a[rel=${rel}], main > nav a[rel=${rel}], nav.pager a[rel=${rel}]`);
    if (link) window.location.href = link.href;
  }

  document.addEventListener("keydown", function (event) {
    const target = event.target;
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (target instanceof HTMLInputElement || target instanceof HTMLSelectElement ||
        target instanceof HTMLTextAreaElement) {
      if (event.key === "Escape") target.blur();
      return;
    }
    if (event.key === "/") {
      const filter = document.getElementById("text-filter");
      if (filter) { event.preventDefault(); filter.focus(); }
    } else if (event.key === "j" || event.key === "k") {
      const delta = event.key === "j" ? 1 : -1;
      if (kind === "episode" && document.getElementById("detail") && !rowLinks().includes(document.activeElement)) {
        follow(delta > 0 ? "next" : "prev");
      } else if (kind === "state") {
        follow(delta > 0 ? "next" : "prev");
      } else {
        moveFocus(delta);
      }
    } else if (event.key === "s" && kind === "episode") {
      const state = document.getElementById("state-link");
      if (state) window.location.href = state.href;
    } else if (event.key === "u") {
      const crumbs = document.querySelectorAll(".crumbs a");
      window.location.href = crumbs.length ? crumbs[crumbs.length - 1].href : "/ui";
    }
  });

  if (kind === "episode" && body.dataset.live === "1") {
    const id = body.dataset.episode;
    let seq = Number(body.dataset.seq || "0");
    const rows = document.getElementById("timeline-rows");
    async function poll() {
      try {
        const answer = await fetch(`/ui/episodes/${encodeURIComponent(id)}/live?after=${seq}`,
                                   { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (answer.ok) {
          const data = await answer.json();
          if (data.seq > seq) {
            rows.insertAdjacentHTML("beforeend", data.rows);  // escaped by the server
            seq = data.seq;
            body.dataset.seq = String(seq);
            const none = document.getElementById("no-calls");
            if (none) none.remove();
          }
          if (data.status !== "active") { window.location.reload(); return; }
        }
      } catch (error) {
        // the server restarted or the network blinked: try again on the next tick
      }
      window.setTimeout(poll, 1000);
    }
    window.setTimeout(poll, 1000);
  }
})();
