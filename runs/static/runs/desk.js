/* AgentOps operator desk: keys and countdowns of the approvals inbox, the raw JSON
   toggle of a tool call's arguments, and the inline resume preview. Loaded on every
   page (the Content-Security-Policy allows no inline script); does nothing where its
   elements are absent. Every action it takes is a plain form a keyboard or a page
   without JavaScript can use as well. */
(function () {
  "use strict";

  // -- approvals inbox: j/k move, a approve, e edit, r reject with a message ---------
  function cards() { return Array.from(document.querySelectorAll("[data-approval]")); }
  function current() {
    const active = document.activeElement;
    return active && active.closest ? active.closest("[data-approval]") : null;
  }
  function typing(el) {
    return !!el && (el.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName));
  }
  function move(step) {
    const list = cards();
    if (!list.length) return;
    const at = list.indexOf(current());
    const next = at < 0 ? 0 : Math.min(Math.max(at + step, 0), list.length - 1);
    list[next].focus();
    list[next].scrollIntoView({ block: "nearest" });
  }
  document.addEventListener("keydown", function (event) {
    const target = event.target;
    if (target && target.classList && target.classList.contains("reject-message")
        && event.key === "Enter" && !event.shiftKey) {
      // Enter sends the message with Reject; Shift+Enter starts a new line.
      const reject = target.form && target.form.querySelector("button[value=reject]:not([disabled])");
      if (reject) { event.preventDefault(); reject.click(); }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || typing(target)) return;
    if (event.key === "j" || event.key === "k") {
      event.preventDefault();
      move(event.key === "j" ? 1 : -1);
      return;
    }
    const list = cards();
    const card = current() || (list.length === 1 ? list[0] : null);
    if (!card) return;
    let focus = null;
    if (event.key === "a") {
      const approve = card.querySelector("button[value=approve]:not([disabled])");
      if (approve) { event.preventDefault(); approve.click(); }
      return;
    }
    if (event.key === "e") {
      const fields = card.querySelector("input[name=edit_mode][value=form]");
      if (fields && !fields.checked) { fields.checked = true; syncMode(fields); }
      focus = card.querySelector(".arg-input") || card.querySelector("textarea[name=arguments]");
    } else if (event.key === "r") {
      focus = card.querySelector(".reject-message") || card.querySelector("button[value=reject]");
    }
    if (focus && !focus.disabled) { event.preventDefault(); focus.focus(); }
  });

  // -- expiry countdowns (seconds left by the database clock when the page was made) --
  const loaded = performance.now();
  function format(seconds) {
    if (seconds < 60) return seconds + "s";
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return minutes + "m " + (seconds % 60) + "s";
    return Math.floor(minutes / 60) + "h " + (minutes % 60) + "m";
  }
  function expire(el) {
    const card = el.closest("[data-approval]");
    const line = el.closest(".expiry");
    if (line) {
      line.textContent = "Expired: it can no longer be decided.";
      line.classList.add("expiry-past");
      line.setAttribute("role", "status");
    }
    if (card) {
      card.classList.add("expired");
      card.querySelectorAll(".decide-form button").forEach(function (b) { b.disabled = true; });
    }
  }
  function tick() {
    document.querySelectorAll(".countdown[data-seconds-left]").forEach(function (el) {
      const left = Math.round(Number(el.dataset.secondsLeft) - (performance.now() - loaded) / 1000);
      if (left <= 0) { el.removeAttribute("data-seconds-left"); expire(el); } else { el.textContent = format(left); }
    });
  }
  if (document.querySelector(".countdown")) { tick(); setInterval(tick, 1000); }

  // -- arguments: generated fields <-> raw JSON ---------------------------------------
  function parse(kind, text) {
    if (kind === "string") return text;
    const t = text.trim();
    if (kind === "boolean") return t === "true" ? true : (t === "false" ? false : t);
    if (kind === "integer" || kind === "number") {
      const n = Number(t);
      return t !== "" && Number.isFinite(n) ? n : t;
    }
    try { return JSON.parse(t); } catch (e) { return t; }
  }
  function shown(kind, value) {
    if (value === undefined || value === null) return "";
    if (kind === "string" && typeof value === "string") return value;
    if (kind === "boolean" && typeof value === "boolean") return String(value);
    return JSON.stringify(value);
  }
  function syncMode(radio) {
    const form = radio.form;
    const raw = form && form.querySelector("textarea[name=arguments]");
    if (!raw) return;
    const inputs = form.querySelectorAll(".arg-input");
    if (radio.value === "json") {
      const out = {};
      inputs.forEach(function (input) {
        if (input.value.trim() === "" && input.dataset.kind !== "string") return;
        out[input.name.slice(4)] = parse(input.dataset.kind, input.value);
      });
      raw.value = JSON.stringify(out, null, 1);
      return;
    }
    let value;
    try { value = JSON.parse(raw.value); } catch (e) { return; }
    if (!value || typeof value !== "object" || Array.isArray(value)) return;
    inputs.forEach(function (input) { input.value = shown(input.dataset.kind, value[input.name.slice(4)]); });
  }
  document.addEventListener("change", function (event) {
    if (event.target && event.target.name === "edit_mode") syncMode(event.target);
  });

  // The first field the server refused gets the focus, so the fix starts there.
  document.addEventListener("DOMContentLoaded", function () {
    const refused = document.querySelector("[aria-invalid=true]");
    if (refused) refused.focus();
  });
})();
