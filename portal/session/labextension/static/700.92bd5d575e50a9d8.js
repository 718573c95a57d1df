"use strict";(self.rspackChunk_dsportal_tensorboard=self.rspackChunk_dsportal_tensorboard||[]).push([[700],{646(t,e,r){var o=r(601),n=r.n(o),a=r(314),i=(r.n(a))()(n());i.push([t.id,`.jp-portal-tensorboard-panel {
  display: flex;
  flex-direction: column;
  min-width: 200px;
  overflow: auto;
  background: var(--jp-layout-color1);
  color: var(--jp-ui-font-color1);
  font-size: var(--jp-ui-font-size1);
}

.jp-portal-tensorboard-panel > header {
  flex: 0 0 auto;
  padding: 8px 12px;
  border-bottom: var(--jp-border-width) solid var(--jp-border-color2);
  font-size: var(--jp-ui-font-size0);
  font-weight: 600;
  letter-spacing: 1px;
  text-transform: uppercase;
}

.jp-portal-tensorboard-status {
  margin: 8px 12px;
  color: var(--jp-ui-font-color2);
}

.jp-portal-tensorboard-status:empty {
  display: none;
}

.jp-portal-tensorboard-list {
  margin: 0;
  padding: 0;
  list-style: none;
}

.jp-portal-tensorboard-item {
  display: flex;
  align-items: center;
  gap: 8px;
  padding: 4px 12px;
}

.jp-portal-tensorboard-item:hover {
  background: var(--jp-layout-color2);
}

.jp-portal-tensorboard-logdir {
  flex: 1 1 auto;
  overflow: hidden;
  text-overflow: ellipsis;
  white-space: nowrap;
  font-family: var(--jp-code-font-family);
}

.jp-portal-tensorboard-open {
  color: var(--jp-content-link-color);
}

.jp-portal-tensorboard-stop.jp-mod-styled {
  height: 24px;
  padding: 0 8px;
  line-height: 24px;
}

.jp-portal-timeleft {
  cursor: pointer;
}

.jp-portal-timeleft.jp-portal-timeleft-warn {
  color: var(--jp-warn-color0);
  font-weight: 600;
}
`,""]),r.d(e,{},{A:i})},314(t){t.exports=function(t){var e=[];return e.toString=function(){return this.map(function(e){var r="",o=void 0!==e[5];return e[4]&&(r+="@supports (".concat(e[4],") {")),e[2]&&(r+="@media ".concat(e[2]," {")),o&&(r+="@layer".concat(e[5].length>0?" ".concat(e[5]):""," {")),r+=t(e),o&&(r+="}"),e[2]&&(r+="}"),e[4]&&(r+="}"),r}).join("")},e.i=function(t,r,o,n,a){"string"==typeof t&&(t=[[null,t,void 0]]);var i={};if(o)for(var p=0;p<this.length;p++){var s=this[p][0];null!=s&&(i[s]=!0)}for(var l=0;l<t.length;l++){var c=[].concat(t[l]);o&&i[c[0]]||(void 0!==a&&(void 0===c[5]||(c[1]="@layer".concat(c[5].length>0?" ".concat(c[5]):""," {").concat(c[1],"}")),c[5]=a),r&&(c[2]&&(c[1]="@media ".concat(c[2]," {").concat(c[1],"}")),c[2]=r),n&&(c[4]?(c[1]="@supports (".concat(c[4],") {").concat(c[1],"}"),c[4]=n):c[4]="".concat(n)),e.push(c))}},e}},601(t){t.exports=function(t){return t[1]}},72(t){var e=[];function r(t){for(var r=-1,o=0;o<e.length;o++)if(e[o].identifier===t){r=o;break}return r}function o(t,o){for(var n={},a=[],i=0;i<t.length;i++){var p=t[i],s=o.base?p[0]+o.base:p[0],l=n[s]||0,c="".concat(s," ").concat(l);n[s]=l+1;var u=r(c),d={css:p[1],media:p[2],sourceMap:p[3],supports:p[4],layer:p[5]};if(-1!==u)e[u].references++,e[u].updater(d);else{var f=function(t,e){var r=e.domAPI(e);return r.update(t),function(e){e?(e.css!==t.css||e.media!==t.media||e.sourceMap!==t.sourceMap||e.supports!==t.supports||e.layer!==t.layer)&&r.update(t=e):r.remove()}}(d,o);o.byIndex=i,e.splice(i,0,{identifier:c,updater:f,references:1})}a.push(c)}return a}t.exports=function(t,n){var a=o(t=t||[],n=n||{});return function(t){t=t||[];for(var i=0;i<a.length;i++){var p=r(a[i]);e[p].references--}for(var s=o(t,n),l=0;l<a.length;l++){var c=r(a[l]);0===e[c].references&&(e[c].updater(),e.splice(c,1))}a=s}}},659(t){var e={};t.exports=function(t,r){var o=function(t){if(void 0===e[t]){var r=document.querySelector(t);if(window.HTMLIFrameElement&&r instanceof window.HTMLIFrameElement)try{r=r.contentDocument.head}catch(t){r=null}e[t]=r}return e[t]}(t);if(!o)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");o.appendChild(r)}},540(t){t.exports=function(t){var e=document.createElement("style");return t.setAttributes(e,t.attributes),t.insert(e,t.options),e}},56(t,e,r){t.exports=function(t){var e=r.nc;e&&t.setAttribute("nonce",e)}},206(t){t.exports=function(t){if("u"<typeof document)return{update:function(){},remove:function(){}};var e=t.insertStyleElement(t);return{update:function(r){var o,n,a;o="",r.supports&&(o+="@supports (".concat(r.supports,") {")),r.media&&(o+="@media ".concat(r.media," {")),(n=void 0!==r.layer)&&(o+="@layer".concat(r.layer.length>0?" ".concat(r.layer):""," {")),o+=r.css,n&&(o+="}"),r.media&&(o+="}"),r.supports&&(o+="}"),(a=r.sourceMap)&&"u">typeof btoa&&(o+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(a))))," */")),t.styleTagTransform(o,e,t.options)},remove:function(){var t;null===(t=e).parentNode||t.parentNode.removeChild(t)}}}},113(t){t.exports=function(t,e){if(e.styleSheet)e.styleSheet.cssText=t;else{for(;e.firstChild;)e.removeChild(e.firstChild);e.appendChild(document.createTextNode(t))}}},959(t,e,r){var o=r(72),n=r.n(o),a=r(206),i=r.n(a),p=r(659),s=r.n(p),l=r(56),c=r.n(l),u=r(540),d=r.n(u),f=r(113),v=r.n(f),m=r(646),h={};h.styleTagTransform=v(),h.setAttributes=c(),h.insert=s().bind(null,"head"),h.domAPI=i(),h.insertStyleElement=d(),n()(m.A,h),m.A&&m.A.locals&&m.A.locals}}]);