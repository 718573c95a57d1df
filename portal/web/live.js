// States that change while a page is open (a queued session starts, a
// notebook job runs or ends), announced (WCAG 4.1.3): the page is read
// again every `seconds` while it is shown; each [data-live] element whose
// text changed is updated in place and said in the page's live region
// (`statusId`, role=status), after its data-live-label; each
// [data-live-swap] element is replaced silently (its buttons follow the
// state). When the set of [data-live] elements differs (a session or job
// came or went), the page is shown again whole, unless the user has
// typed into a form on it (then only the states change, in place).
// Its reads say X-Portal-Live: 1 (a page may answer them from a shared,
// recent view of Slurm). `xsrf`: the page's XSRF token, which JupyterHub asks of a cookie's
// request that is not a navigation (without it the read is sent to log in).
function portalLive(statusId, seconds, xsrf) {
  "use strict";
  var status = document.getElementById(statusId);
  if (!status || !window.fetch || !window.DOMParser) return;
  var typed = false;
  document.addEventListener("input", function () { typed = true; });
  function keys(root, attr) {
    return Array.prototype.map.call(root.querySelectorAll("[" + attr + "]"), function (el) {
      return el.getAttribute(attr);
    }).join(" ");
  }
  function find(root, attr, key) {
    return Array.prototype.find.call(root.querySelectorAll("[" + attr + "]"), function (el) {
      return el.getAttribute(attr) === key;
    });
  }
  function refresh() {
    if (document.visibilityState !== "visible") return;
    fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html", "X-XSRFToken": xsrf || "", "X-Portal-Live": "1" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        if (!typed && (keys(fresh, "data-live") !== keys(document, "data-live") ||
            keys(fresh, "data-live-swap") !== keys(document, "data-live-swap"))) {
          return window.location.reload();
        }
        var said = [];
        fresh.querySelectorAll("[data-live]").forEach(function (el) {
          var here = find(document, "data-live", el.getAttribute("data-live"));
          if (!here || here.textContent === el.textContent) return;
          here.textContent = el.textContent;
          here.className = el.className;
          said.push(((el.getAttribute("data-live-label") || "") + " " + el.textContent.trim()).trim());
        });
        fresh.querySelectorAll("[data-live-swap]").forEach(function (el) {
          var here = find(document, "data-live-swap", el.getAttribute("data-live-swap"));
          if (here && here.innerHTML !== el.innerHTML) here.innerHTML = el.innerHTML;
        });
        if (said.length) status.textContent = said.join("; ");
      })
      .catch(function () {});
  }
  setInterval(refresh, seconds * 1000);
  return refresh;
}
