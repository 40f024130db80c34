// ouro view: reload the page when a lineage grows (an apply is running).
// The only script ouro serves; the Content-Security-Policy allows no other.
(function () {
  "use strict";
  var body = document.body;
  var url = body.getAttribute("data-heads-url");
  var seen = body.getAttribute("data-heads");
  document.documentElement.setAttribute("data-ouro-live", "1");
  if (!url || seen === null) {
    return;
  }
  function poll() {
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (text) {
        if (text !== null && text !== seen) {
          window.location.reload();
          return;
        }
        window.setTimeout(poll, 2000);
      })
      .catch(function () { window.setTimeout(poll, 5000); });
  }
  window.setTimeout(poll, 2000);
}());
