// The local room: the conversation, the pool's gauge and chart, what each persona is doing, and the settings.
// Plain JavaScript, no build step. The snapshot draws the room once; the event stream keeps it current.
"use strict";

(() => {
  const TIERS = ["aizuchi", "remark", "long"];
  const CHART_SECONDS = 120; // the chart shows at most this much of the past...
  const CHART_MIN_SECONDS = 20; // ...and at least this much, so a fresh page already shows the rhythm
  const SETTLE_MS = 4000; // "passed" and "spoke" show this long, then the persona is waiting again
  const HUMAN_COLOR = "#5f6368";
  const FALLBACK_COLORS = ["#3a6ea5", "#2a9d8f", "#e4572e", "#8e44ad", "#f08a24", "#4361ee", "#6a994e"];
  const NAME_KEY = "aizuchi.room.name";

  const channelId = decodeURIComponent(location.pathname.split("/")[2] || "lobby");
  const apiUrl = (path) => `/room/api/${encodeURIComponent(channelId)}/${path}`;
  const $ = (id) => document.getElementById(id);

  const state = {
    settings: null,
    level: null,
    capacity: null,
    lastSeq: 0,
    personas: new Map(), // id -> {id, display_name, color}
    messages: new Map(), // seq -> <li>
    activity: new Map(), // persona id -> {what, until}
    levels: [], // [{t: ms, level, capacity}], oldest first
    socket: null,
    retryMs: 500,
    refreshing: false,
  };

  // --- small helpers --------------------------------------------------------------------------------

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else node.setAttribute(key, value);
    }
    node.append(...children);
    return node;
  }

  async function request(method, path, body) {
    const options = { method, headers: {} };
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(apiUrl(path), options);
    } catch (error) {
      throw new Error("the arbiter cannot be reached");
    }
    const data = await response.json().catch(() => null);
    if (!response.ok) {
      const detail = data && data.error;
      const failure = new Error(detail ? detail.message : `HTTP ${response.status}`);
      failure.field = detail ? detail.field : null;
      throw failure;
    }
    return data;
  }

  function colorOf(message) {
    if (message.author_kind !== "persona") return HUMAN_COLOR;
    const persona = state.personas.get(message.author_id);
    return persona && persona.color ? persona.color : fallbackColor(message.author_id);
  }

  function fallbackColor(id) {
    let hash = 0;
    for (const char of id) hash = (hash * 31 + char.codePointAt(0)) >>> 0;
    return FALLBACK_COLORS[hash % FALLBACK_COLORS.length];
  }

  // Text on a coloured name chip: black or white, whichever reads better (WCAG relative luminance).
  function inkFor(hex) {
    const channels = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255);
    const [r, g, b] = channels.map((c) => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4));
    const luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b;
    return luminance > 0.179 ? "#111111" : "#ffffff";
  }

  function chip(name, color) {
    const node = el("span", { class: "who", text: name });
    node.style.setProperty("background-color", color);
    node.style.setProperty("color", inkFor(color));
    return node;
  }

  function clock(seconds) {
    return new Date(seconds * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  }

  // --- the conversation -----------------------------------------------------------------------------

  function messageNode(message) {
    const item = el("li", {
      class: `message kind-${message.author_kind}`,
      "data-seq": String(message.seq),
      "data-author": message.author_id,
      "data-author-kind": message.author_kind,
    });
    const head = el("div", { class: "head" }, chip(message.author_name, colorOf(message)));
    if (message.tier) {
      item.dataset.tier = message.tier;
      item.dataset.cost = String(message.cost);
      head.append(el("span", { class: `badge tier-${message.tier}`, title: `cost ${message.cost}`, text: message.tier }));
    }
    head.append(el("time", { datetime: new Date(message.at * 1000).toISOString(), text: clock(message.at) }));
    item.append(head, el("p", { class: "text", text: message.text }));
    return item;
  }

  function showMessage(message) {
    const list = $("messages");
    const scroller = $("scroller");
    const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 48;
    const node = messageNode(message);
    const existing = state.messages.get(message.seq);
    if (existing) {
      existing.replaceWith(node);
    } else {
      // Events arrive in seq order, so this appends; a message that is somehow late still goes in its place.
      const next = [...list.children].find((other) => Number(other.dataset.seq) > message.seq) || null;
      list.insertBefore(node, next);
    }
    state.messages.set(message.seq, node);
    state.lastSeq = Math.max(state.lastSeq, message.seq);
    $("empty").hidden = state.messages.size > 0;
    if (atBottom) scroller.scrollTop = scroller.scrollHeight;
    if (message.author_kind === "persona" && !state.personas.has(message.author_id)) refreshPersonas();
  }

  function removeMessage(seq) {
    const node = state.messages.get(seq);
    if (node) node.remove();
    state.messages.delete(seq);
    $("empty").hidden = state.messages.size > 0;
  }

  // The history was cleared up to lastSeq. Only those go: seqs go on after it, and a stream that resumed (?after=)
  // may bring the clear after messages said since.
  function clearMessages(lastSeq) {
    for (const seq of [...state.messages.keys()]) if (seq <= lastSeq) removeMessage(seq);
  }

  // --- the pool -------------------------------------------------------------------------------------

  function setLevel(level, capacity) {
    state.level = level;
    state.capacity = capacity;
    state.levels.push({ t: Date.now(), level, capacity });
    pruneLevels();
    showGauge();
    drawChart();
  }

  function showGauge() {
    if (state.level === null) return;
    const { level, capacity } = state;
    const gauge = $("gauge");
    const share = capacity > 0 ? Math.max(0, Math.min(1, level / capacity)) : 0;
    gauge.setAttribute("aria-valuemax", String(capacity));
    gauge.setAttribute("aria-valuenow", String(level));
    gauge.setAttribute("aria-valuetext", `${level} of ${capacity}`);
    $("gauge-fill").style.setProperty("width", `${(share * 100).toFixed(1)}%`);
    $("gauge-text").textContent = `${level} / ${capacity}`;
    const costs = tierCosts();
    gauge.dataset.band = level >= costs.remark ? "high" : level >= costs.aizuchi ? "low" : "empty";
    showTierCosts();
  }

  function tierCosts() {
    const tiers = state.settings ? state.settings.tiers : {};
    return Object.fromEntries(TIERS.map((tier) => [tier, tiers[tier] ? tiers[tier].cost : Infinity]));
  }

  function showTierCosts() {
    const list = $("tier-costs");
    const costs = tierCosts();
    list.replaceChildren(
      ...TIERS.map((tier) => {
        const affordable = state.level !== null && state.level >= costs[tier];
        return el(
          "li",
          { class: affordable ? "affordable" : "short", "data-tier": tier },
          el("span", { class: `badge tier-${tier}`, text: tier }),
          ` ${Number.isFinite(costs[tier]) ? costs[tier] : "–"}`,
          el("span", { class: "visually-hidden", text: affordable ? " (affordable now)" : " (not affordable now)" }),
        );
      }),
    );
  }

  function pruneLevels() {
    const cutoff = Date.now() - CHART_SECONDS * 1000;
    // Keep the last point before the window: it is the level at the window's left edge.
    while (state.levels.length > 1 && state.levels[1].t < cutoff) state.levels.shift();
  }

  function drawChart() {
    const canvas = $("chart");
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth || canvas.width;
    const height = canvas.clientHeight || canvas.height;
    if (canvas.width !== Math.round(width * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, width, height);
    g.fillStyle = "#f3f4f6";
    g.fillRect(0, 0, width, height);
    if (!state.levels.length) return;
    const now = Date.now();
    const seconds = Math.min(CHART_SECONDS, Math.max(CHART_MIN_SECONDS, (now - state.levels[0].t) / 1000));
    const start = now - seconds * 1000;
    const top = Math.max(...state.levels.map((p) => p.capacity), 1);
    const x = (t) => ((Math.max(t, start) - start) / (seconds * 1000)) * width;
    const y = (level) => height - 2 - (level / top) * (height - 4);
    g.strokeStyle = "#c7cbd1";
    g.setLineDash([3, 3]);
    g.beginPath();
    g.moveTo(0, y(top));
    g.lineTo(width, y(top));
    g.stroke();
    g.setLineDash([]);
    // A step line: the level holds until the next event changes it.
    g.beginPath();
    state.levels.forEach((point, index) => {
      if (index === 0) g.moveTo(x(point.t), y(point.level));
      else {
        g.lineTo(x(point.t), y(state.levels[index - 1].level));
        g.lineTo(x(point.t), y(point.level));
      }
    });
    g.lineTo(width, y(state.levels[state.levels.length - 1].level));
    g.lineWidth = 2;
    g.strokeStyle = "#2f6f4f";
    g.stroke();
    const span = `the last ${Math.round(seconds)} s`;
    if ($("chart-span").textContent !== span) {
      $("chart-span").textContent = span;
      canvas.setAttribute("aria-label", `The pool's level over ${span}`);
    }
  }

  // --- the personas ---------------------------------------------------------------------------------

  function setActivity(personaId, what, claimTtl) {
    const lasts = what === "thinking" ? (claimTtl || 30) * 1000 : what === "waiting" ? Infinity : SETTLE_MS;
    state.activity.set(personaId, { what, until: Date.now() + lasts });
    showPersonas();
  }

  function activityOf(personaId) {
    const entry = state.activity.get(personaId);
    return entry && entry.until > Date.now() ? entry.what : "waiting";
  }

  function showPersonas() {
    const list = $("personas");
    const policies = state.settings ? state.settings.personas : {};
    list.replaceChildren(
      ...[...state.personas.values()].map((persona) => {
        const policy = policies[persona.id];
        let what = activityOf(persona.id);
        if (policy && !policy.enabled) what = "off";
        else if (policy && policy.muted) what = "muted";
        const color = persona.color || fallbackColor(persona.id);
        return el(
          "li",
          { "data-persona": persona.id, "data-activity": what },
          chip(persona.display_name, color),
          el("span", { class: `activity activity-${what}`, text: what }),
        );
      }),
    );
  }

  async function refreshPersonas() {
    if (state.refreshing) return;
    state.refreshing = true;
    try {
      const snapshot = await request("GET", "snapshot");
      setPersonas(snapshot.personas);
    } catch (error) {
      console.warn("could not refresh the personas:", error.message);
    } finally {
      state.refreshing = false;
    }
  }

  function setPersonas(personas) {
    state.personas = new Map(personas.map((p) => [p.id, p]));
    showPersonas();
    for (const node of state.messages.values()) {
      if (node.dataset.authorKind !== "persona") continue;
      const persona = state.personas.get(node.dataset.author);
      const color = persona && persona.color ? persona.color : fallbackColor(node.dataset.author);
      const who = node.querySelector(".who");
      who.style.setProperty("background-color", color);
      who.style.setProperty("color", inkFor(color));
    }
  }

  // --- settings -------------------------------------------------------------------------------------

  function settingValue(settings, name) {
    return name.split(".").reduce((value, key) => (value == null ? undefined : value[key]), settings);
  }

  function applySettings(settings) {
    const previous = state.settings;
    state.settings = settings;
    for (const input of $("settings").querySelectorAll("input[name]")) {
      const value = String(settingValue(settings, input.name));
      // A field the person is editing keeps what they typed; the others follow the channel.
      const edited = previous && input.value !== String(settingValue(previous, input.name));
      if (!edited || input.value === value) {
        input.value = value;
        input.removeAttribute("aria-invalid");
      }
    }
    const pause = $("pause");
    pause.textContent = settings.paused ? "Resume" : "Pause";
    pause.setAttribute("aria-pressed", String(settings.paused));
    $("paused-note").hidden = !settings.paused;
    document.body.classList.toggle("paused", settings.paused);
    showGauge(); // the tiers' costs may have changed; the level itself comes with its own event
    showTierCosts();
    showPersonas();
  }

  function changedSettings() {
    const changes = {};
    for (const input of $("settings").querySelectorAll("input[name]")) {
      const text = input.value.trim();
      if (text === String(settingValue(state.settings, input.name))) continue;
      const number = text === "" ? NaN : Number(text);
      if (Number.isNaN(number)) {
        const problem = new Error(`${input.getAttribute("aria-label") || input.name}: enter a number`);
        problem.field = input.name;
        throw problem;
      }
      const path = input.name.split(".");
      let target = changes;
      for (const key of path.slice(0, -1)) target = target[key] = target[key] || {};
      target[path[path.length - 1]] = number;
    }
    return changes;
  }

  function showSettingsError(error) {
    $("settings-note").textContent = "";
    $("settings-error").textContent = error.message;
    const form = $("settings");
    for (const input of form.querySelectorAll("input[name]")) input.removeAttribute("aria-invalid");
    // The API names the field ("tiers.remark.cost"); mark that input, or the closest one it is part of.
    const field = error.field || "";
    const related = (name) => name === field || field.startsWith(`${name}.`) || name.startsWith(`${field}.`);
    const input = [...form.querySelectorAll("input[name]")].find((candidate) => related(candidate.name));
    if (input) {
      input.setAttribute("aria-invalid", "true");
      input.focus();
    }
  }

  async function saveSettings(changes, done) {
    $("settings-error").textContent = "";
    try {
      const settings = await request("PATCH", "settings", changes);
      for (const input of $("settings").querySelectorAll("input[name]")) input.removeAttribute("aria-invalid");
      applySettings(settings);
      $("settings-note").textContent = done;
    } catch (error) {
      showSettingsError(error);
    }
  }

  // --- the event stream -----------------------------------------------------------------------------

  function onEvent(event) {
    switch (event.type) {
      case "message":
        showMessage(event.message);
        if (event.message.author_kind === "persona") setActivity(event.message.author_id, "spoke");
        break;
      case "edited":
        if (state.messages.has(event.message.seq)) showMessage(event.message);
        break;
      case "retracted":
      case "deleted":
        removeMessage(event.seq);
        break;
      case "cleared":
        clearMessages(event.last_seq);
        state.lastSeq = Math.max(state.lastSeq, event.last_seq);
        break;
      case "level":
        setLevel(event.level, event.capacity);
        break;
      case "settings":
        applySettings(event.settings);
        break;
      case "claim": {
        const claim = event.claim;
        const what = { held: "thinking", spoken: "spoke", released: "passed", retracted: "waiting" }[claim.state];
        if (what) setActivity(claim.persona, what, state.settings && state.settings.claim_ttl_s);
        break;
      }
      default:
        break; // a kind of event this page does not know yet
    }
  }

  function setConnection(what, text) {
    const node = $("connection");
    node.dataset.state = what;
    node.textContent = text;
  }

  // The stream replays the messages after the seq it is given as they are now, then sends the level. Asking
  // from before the recent messages shown, rather than after the last one, also brings what happened to them
  // while the page was away: edited ones come back edited, and those that do not come back were deleted or
  // retracted. Older messages are left as shown, so a long-open page does not replay everything it holds.
  const RESYNC = 200;

  function connect() {
    const recent = [...state.messages.keys()].filter((seq) => seq > state.lastSeq - RESYNC);
    const after = recent.length ? Math.min(...recent) - 1 : state.lastSeq;
    let replayed = new Set(); // seqs the replay brought; null once it is over
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const url = `${scheme}//${location.host}${apiUrl("events")}?after=${after}`;
    const socket = new WebSocket(url);
    state.socket = socket;
    socket.addEventListener("open", () => {
      state.retryMs = 500;
      setConnection("live", "live");
    });
    socket.addEventListener("message", (frame) => {
      try {
        const event = JSON.parse(frame.data);
        if (replayed && event.type === "message") replayed.add(event.message.seq);
        if (replayed && event.type === "level") {
          for (const seq of recent) if (!replayed.has(seq)) removeMessage(seq);
          replayed = null;
        }
        onEvent(event);
      } catch (error) {
        console.warn("could not show an event:", error);
      }
    });
    socket.addEventListener("close", () => {
      if (state.socket !== socket) return;
      state.socket = null;
      const wait = state.retryMs;
      state.retryMs = Math.min(state.retryMs * 2, 8000);
      setConnection("reconnecting", `reconnecting in ${Math.ceil(wait / 1000)} s…`);
      window.setTimeout(connect, wait);
    });
  }

  // --- start ----------------------------------------------------------------------------------------

  async function start() {
    $("room-name").textContent = channelId;
    document.title = `${channelId} · aizuchi room`;
    $("switch-room").value = channelId;
    const name = $("name");
    name.value = localStorage.getItem(NAME_KEY) || "";
    name.addEventListener("input", () => localStorage.setItem(NAME_KEY, name.value.trim()));

    $("switch").addEventListener("submit", (event) => {
      event.preventDefault();
      const input = $("switch-room");
      if (input.reportValidity()) location.assign(`/room/${encodeURIComponent(input.value.trim())}`);
    });

    const text = $("text");
    text.addEventListener("keydown", (event) => {
      // Enter sends; Shift+Enter is a new line; Enter that confirms an input method's conversion is neither.
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing && event.keyCode !== 229) {
        event.preventDefault();
        $("composer").requestSubmit();
      }
    });
    $("composer").addEventListener("submit", async (event) => {
      event.preventDefault();
      const error = $("say-error");
      const body = { name: name.value.trim(), text: text.value.trim() };
      if (!body.name) {
        error.textContent = "Enter your name first.";
        name.focus();
        return;
      }
      if (!body.text) return;
      const send = $("send");
      send.disabled = true;
      try {
        await request("POST", "say", body);
        error.textContent = "";
        text.value = "";
      } catch (failure) {
        error.textContent = failure.message;
      } finally {
        send.disabled = false;
        text.focus();
      }
    });

    $("settings").addEventListener("submit", async (event) => {
      event.preventDefault();
      let changes;
      try {
        changes = changedSettings();
      } catch (problem) {
        showSettingsError(problem);
        return;
      }
      if (!Object.keys(changes).length) {
        $("settings-error").textContent = "";
        $("settings-note").textContent = "Nothing changed.";
        return;
      }
      await saveSettings(changes, "Saved.");
    });
    $("pause").addEventListener("click", () => {
      const paused = !(state.settings && state.settings.paused);
      saveSettings({ paused }, paused ? "Paused." : "Resumed.");
    });

    window.setInterval(() => {
      pruneLevels();
      drawChart();
      showPersonas();
    }, 1000);
    window.addEventListener("resize", drawChart);

    try {
      const snapshot = await request("GET", "snapshot");
      $("notice").textContent = snapshot.notice || "";
      $("notice").hidden = !snapshot.notice;
      setPersonas(snapshot.personas);
      applySettings(snapshot.settings);
      for (const message of snapshot.history) showMessage(message);
      state.lastSeq = snapshot.last_seq;
      setLevel(snapshot.status.level, snapshot.status.capacity);
      $("scroller").scrollTop = $("scroller").scrollHeight;
    } catch (error) {
      setConnection("offline", `cannot load the room: ${error.message}`);
      return;
    }
    connect();
  }

  start();
})();
